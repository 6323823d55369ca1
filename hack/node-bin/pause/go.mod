module rollcall.local/pause

go 1.26

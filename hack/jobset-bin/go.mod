module rollcall.local/jobset-bin

// The JobSet controller, built by hack/jobset.sh: `go build sigs.k8s.io/jobset` in this module (the proxy
// serves v0.12.0 but not its version list, which `go install pkg@version` reads).

go 1.26.0

require sigs.k8s.io/jobset v0.12.0

"""``python -m rollcall_workload``: one rank of the roll call (torchrun starts one per accelerator)."""

from rollcall_workload.main import end_process, main

end_process(main())

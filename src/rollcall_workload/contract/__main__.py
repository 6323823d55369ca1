"""``python -m rollcall_workload.contract --markdown > docs/contract.md``: the contract's reference."""

from __future__ import annotations

import sys

from rollcall_workload.contract import markdown


def main(argv: list[str]) -> int:
    """Print the reference; 2 on any other command line."""
    if argv != ["--markdown"]:
        print("usage: python -m rollcall_workload.contract --markdown > docs/contract.md", file=sys.stderr)
        return 2
    sys.stdout.write(markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""The PASS/FAIL lines of the e2e scripts and their exit status."""
from __future__ import annotations


class Checks:
    def __init__(self) -> None:
        self.failures: list[str] = []

    def __call__(self, ok: bool, label: str, detail: str = "") -> None:
        print(f"{'PASS' if ok else 'FAIL'} {label}" + (f": {detail}" if detail else ""), flush=True)
        if not ok:
            self.failures.append(label)

    def finish(self) -> int:
        """Prints the summary; the script's exit status."""
        print(f"{len(self.failures)} failed" if self.failures else "all passed")
        return 1 if self.failures else 0

"""The demo model's text: the King James Bible by chapter, read through the `bible` program of
the Debian package bible-kjv (public domain; nothing of the text is stored here). Shared by
train.py and the quantization accuracy test (test/e2e/quantization.py), which evaluates on the
chapters training held out."""

import re
import shutil
import subprocess
import sys

HOLD_OUT_EVERY = 100  # every 100th chapter is held out to report a validation loss


def read_chapters() -> list[str]:
    """The KJV as a list of chapters, each its verses (without numbers) one per line."""
    if shutil.which("bible") is None:
        sys.exit("kjv.py: the `bible` program is missing; install the text with: apt-get install bible-kjv-text")
    # -l sets the line width: wide enough that no verse is wrapped.
    text = subprocess.run(
        ["bible", "-l100000", "gen1:1-rev22:21"], check=True, capture_output=True, text=True
    ).stdout
    chapters: list[list[str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        verse = re.match(r"^\s+\d+ (.+)$", line)
        if verse:
            chapters[-1].append(verse.group(1).strip())
        elif re.match(r"^\S.* \d+$", line):  # a chapter heading such as "Genesis 1"
            chapters.append([])
        else:
            sys.exit(f"kjv.py: unexpected line from `bible`: {line!r}")
    if len(chapters) != 1189 or sum(map(len, chapters)) != 31102:
        verses = sum(map(len, chapters))
        sys.exit(f"kjv.py: expected 1189 chapters and 31102 verses, got {len(chapters)} and {verses}")
    return ["\n".join(verses) for verses in chapters]


def is_held_out(index: int) -> bool:
    """Whether chapter `index` (0-based) was kept out of training."""
    return index % HOLD_OUT_EVERY == HOLD_OUT_EVERY // 2

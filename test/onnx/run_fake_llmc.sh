#!/bin/sh
# Runs fake_llmc.py with the Python that runs the harness (see fake_llmc.py); pass it as --llmc.
exec "${LLMC_FAKE_PYTHON:-$(dirname "$0")/../../.venv/bin/python}" "$(dirname "$0")/fake_llmc.py" "$@"

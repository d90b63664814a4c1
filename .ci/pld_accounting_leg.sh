#!/usr/bin/env bash
# CI leg: our k-out-of-t random-allocation bounds against the public pld-accounting package
# (Feldman & Shenfeld, arXiv:2602.17284) in a venv of its own, pinned by
# constraints/pld_accounting.txt (it needs numpy 2 / dp-accounting 0.6; the main test venv pins
# numpy 1.26 for TensorFlow 2.15).  The test file skips cleanly where pld_accounting is absent,
# so it is only meaningful here.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== pld-accounting comparison (pld-accounting from constraints/pld_accounting.txt) =="
VENV=.venv-pldacc
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install -q --disable-pip-version-check -c constraints/pld_accounting.txt \
    -e . "pld-accounting[performance]" pytest
"$VENV/bin/python" -c "import PLD_accounting, numpy, numba; print('pld-accounting', PLD_accounting.__name__, '| numpy', numpy.__version__, '| numba', numba.__version__)"
timeout 1200 "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
    tests/test_allocation_vs_pld_accounting.py

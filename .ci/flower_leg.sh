#!/usr/bin/env bash
# CI leg: the Flower integration (tests/test_flower.py) in its own venv, pinned by
# constraints/flower.txt (Flower's pins clash with the main test venv's TensorFlow 2.15/numpy<2).
# A real federation runs in-process on the simulation engine (Ray on 127.0.0.1): loopback only,
# no telemetry.  Installs with uv (pinned in constraints/flower.txt: Flower itself depends on it),
# which fetches in parallel (~30 s; pip alone needs 3-5 min here), and falls back to pip.
set -euo pipefail
cd "$(dirname "$0")/.."

export FLWR_TELEMETRY_ENABLED=0            # Flower posts usage events to its server otherwise
export RAY_USAGE_STATS_ENABLED=0
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0  # Ray's node address: 127.0.0.1, not the NIC's
export RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=0

echo "== Flower integration (flwr from constraints/flower.txt) =="
VENV=.venv-flower
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
PACKAGES=(-e . "flwr[simulation]" scikit-learn pytest)
if "$VENV/bin/pip" install -q --disable-pip-version-check -c constraints/flower.txt uv &&
   "$VENV/bin/uv" pip install -q --python "$VENV/bin/python" --native-tls \
       -c constraints/flower.txt "${PACKAGES[@]}"; then
    echo "installed with uv"
else
    echo "uv failed; installing with pip"
    "$VENV/bin/pip" install -q --disable-pip-version-check -c constraints/flower.txt \
        "${PACKAGES[@]}"
fi
"$VENV/bin/python" -c "import flwr, ray, numpy; print('flwr', flwr.__version__, '| ray', ray.__version__, '| numpy', numpy.__version__)"
timeout 900 "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/test_flower.py

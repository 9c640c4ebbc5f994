#!/bin/sh
# jupyter_kernel.sh — the Jupyter kernel (jupyter/tfe_kernel.py) spoken to by
# jupyter_client, and the notebooks of examples/notebooks run headless by
# nbclient (tests/jupyter_kernel.py). The Python used: $TFE_JUPYTER_PYTHON if
# set (.ci/run sets it to its venv's), else python3; without jupyter_client,
# ipykernel, nbclient and nbformat there the test is skipped (77).
: "${TFE:?TFE is not set (run through make check)}"
: "${TFE_SRCDIR:?TFE_SRCDIR is not set (run through make check)}"
has_jupyter() { "$1" -c 'import jupyter_client, ipykernel, nbclient, nbformat' >/dev/null 2>&1; }
for py in "${TFE_JUPYTER_PYTHON:-}" "${TFE_PYTHON3:-python3}"; do
    [ -n "$py" ] && has_jupyter "$py" && exec "$py" "$TFE_SRCDIR/tests/jupyter_kernel.py" "$@"
done
echo "jupyter: no Python here can import jupyter_client, ipykernel, nbclient and nbformat; skipping"
exit 77

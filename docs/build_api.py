"""Build the API reference (HTML from the docstrings, with pdoc) and fail on any pdoc warning.

    python docs/build_api.py [--output build/api]

Documents ``dpplugins`` (the core) and the framework integrations that import in this
environment (``dpplugins.integrations.flower`` needs Flower's own environment and is documented there when
it imports).  Docstrings are read as reStructuredText (``code``, ``Example::`` blocks).  Exit
status 1 and the list of warnings if pdoc warned (a broken cross-reference, a module that does
not import, a docstring it cannot parse); 0 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def modules() -> list[str]:
    names = ["dpplugins", "dpplugins.integrations"]
    if importlib.util.find_spec("flwr") is None:
        names.append("!dpplugins.integrations.flower")
    return names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=ROOT / "build" / "api")
    args = parser.parse_args()
    output = args.output.resolve()
    output.mkdir(parents=True, exist_ok=True)
    os.chdir(output)   # the installed package is documented, never a same-named folder in cwd
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")   # TensorFlow's start-up chatter
    os.environ.setdefault("PDOC_ALLOW_EXEC", "1")
    import pdoc
    import pdoc.render

    pdoc.render.configure(docformat="restructuredtext", show_source=False,
                          footer_text="dpplugins API reference")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pdoc.pdoc(*modules(), output_directory=output)
    ours = [w for w in caught if "pdoc" in (w.filename or "")]
    for w in ours:
        print(f"warning: {w.message}", file=sys.stderr)
    pages = sum(1 for _ in output.rglob("*.html"))
    print(f"API reference: {pages} pages in {output}; {len(ours)} pdoc warnings")
    return 1 if ours else 0


if __name__ == "__main__":
    sys.exit(main())

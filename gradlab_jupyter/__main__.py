"""``python -m gradlab_jupyter install [PREFIX]``: enable the pre-save hook in an environment's Jupyter."""

from __future__ import annotations

import sys

from . import install_server_config

if __name__ == "__main__":
    if len(sys.argv) not in (2, 3) or sys.argv[1] != "install":
        raise SystemExit(__doc__)
    print(install_server_config(sys.argv[2] if len(sys.argv) == 3 else None))

"""One ``MultiWorkerMirroredStrategy`` worker process (chapter 08).

:func:`gradlab.train.distribute.run_workers` starts one process per worker as
``python <path>/gradlab/train/distribute_worker.py '{json keyword arguments}'``, each with its own
``TF_CONFIG`` (the cluster on 127.0.0.1 and its task index). The script builds the strategy,
runs :func:`gradlab.train.distribute.train_toy` with the given keyword arguments, and prints the
result as one JSON line on standard output.

It is run as a file, not with ``python -m gradlab.train.distribute_worker``: ``-m`` would import the
``gradlab`` package first, and ``import gradlab`` runs a TensorFlow op, after which
``MultiWorkerMirroredStrategy()`` fails with "Collective ops must be configured at program
startup". So TensorFlow is imported and the strategy created *before* gradlab.
"""

from __future__ import annotations

import json
import os
import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    kwargs = json.loads(argv[0]) if argv else {}
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # before any op runs
    import gradlab  # finds TensorFlow imported and leaves the devices alone
    from gradlab.train.distribute import train_toy

    gradlab.setup(seed=0, plots=False)
    result = train_toy(strategy, **kwargs)
    result["task"] = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    # Run as a file, Python puts this file's folder (gradlab/train/) first on sys.path; drop it, so
    # that `import gradlab` finds the package through the repository root instead.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    sys.exit(main())

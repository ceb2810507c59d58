"""scikit-learn's ``n_jobs`` and joblib's ``Parallel`` on leakypool workers, unchanged.

``pool.joblib.register()`` adds the joblib backend "leakypool"; inside
``parallel_config(backend="leakypool", n_jobs=N)`` every ``n_jobs`` runs on a
reusable pool of N local workers (or, with ``executor=``, on a `pool.Executor`
of your own: LAN workers, recycling, an initializer). Needs the ``joblib``
extra and scikit-learn.

    python examples/joblib_sklearn.py [--workers 2]
"""

from __future__ import annotations

import argparse
import math

from joblib import Parallel, delayed, parallel_config
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV
from sklearn.svm import SVC

import pool
import pool.joblib


def main() -> None:
    parser = argparse.ArgumentParser(description="joblib and scikit-learn on leakypool workers")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    args = parser.parse_args()

    pool.joblib.register()
    with parallel_config(backend="leakypool", n_jobs=args.workers):
        roots = Parallel()(delayed(math.sqrt)(i) for i in range(10_000))  # joblib batches tiny tasks itself
        print(f"sum of 10,000 square roots: {sum(roots):.1f}")

        X, y = load_digits(return_X_y=True)  # shipped with scikit-learn: no download
        search = GridSearchCV(SVC(), {"C": [1, 10], "gamma": ["scale", 0.001]}, cv=3, n_jobs=-1).fit(X, y)
        print(f"best {search.best_params_} with accuracy {search.best_score_:.3f}")

    with pool.Executor(max_workers=args.workers) as ex, parallel_config(backend="leakypool", executor=ex):
        print("on an executor of your own:", Parallel()(delayed(pow)(2, i) for i in range(5)))
    pool.joblib.shutdown()  # (also done at exit) the reusable workers exit


if __name__ == "__main__":
    main()

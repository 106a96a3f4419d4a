"""Ray job entry point: the same Hydra app as `python -m ehrbench`, for `ray job submit -- python jobs/evaluate.py ...`.

With `runtime.address=auto` (or RAY_ADDRESS set by `ray job submit`) it joins the cluster instead of starting one.
"""
from ehrbench.__main__ import main

if __name__ == "__main__":
    main()

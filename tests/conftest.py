"""Shared pytest settings for the course's tests."""

# The fixture notebooks are inputs of tests/test_build.py and tests/test_student_notebooks.py
# (one fails on purpose); keep `pytest --nbval...` from collecting them as notebooks to run.
collect_ignore_glob = ["fixtures/*"]

# The unit tests use tiny tensors: one thread is several times faster than torch's default
# on a busy 2-core machine (thread start-up and contention dominate). Notebook kernels are
# separate processes and keep torch's default.
import torch  # noqa: E402

torch.set_num_threads(1)

"""Small dense products written as loops, shared by the kernels of modal bodies (sim/flexible_kernels.py) and of
Cosserat rods (sim/cosserat/). At the sizes these kernels use (6 x 6, 6 x n_q with n_q of a few tens) a call to
BLAS from numba, with its temporary, costs several times the arithmetic; the loops sum in index order, so a
result does not depend on the machine's BLAS or its threads.

Both kernel groups of sim/kernel_cache.py list this file among their sources: an edit recompiles the kernels
that inline it.
"""
from __future__ import annotations

from numba import njit


@njit(cache=True)
def mat_vec(A, x, out):
    """out (m,) = A (m, k) @ x (k,), any layouts (``mat_vec(A.T, x, out)`` for A^T x)."""
    for i in range(A.shape[0]):
        acc = 0.0
        for k in range(A.shape[1]):
            acc += A[i, k] * x[k]
        out[i] = acc


@njit(cache=True)
def mat_mat(A, B, out):
    """out (m, n) = A (m, k) @ B (k, n), any layouts."""
    for i in range(A.shape[0]):
        for j in range(B.shape[1]):
            acc = 0.0
            for k in range(A.shape[1]):
                acc += A[i, k] * B[k, j]
            out[i, j] = acc

"""DAPO dynamic sampling (Yu et al. 2025, sec. 3.2): a group whose responses all got the same
reward has zero advantage under every group-relative estimator, so it only dilutes the batch."""

from __future__ import annotations

import torch
from torch import Tensor

from hybridrl.algos.advantages import group_sum


def groups_with_spread(metric: Tensor, uid: Tensor) -> Tensor:
    """[N] bool: True for the rows of every uid group whose `metric` values are not all equal.

    A group of one response is kept (it has nothing to compare with), as in verl.
    metric: [N] float; uid: [N] long.
    """
    metric = metric.double()
    _, group = torch.unique(uid, return_inverse=True)  # [N] in 0..G-1
    G = int(group.max()) + 1
    lo = torch.full((G,), float("inf"), dtype=metric.dtype).scatter_reduce(0, group, metric, "amin")
    hi = torch.full((G,), float("-inf"), dtype=metric.dtype).scatter_reduce(0, group, metric, "amax")
    count = group_sum(torch.ones_like(metric), uid)
    # max > min compares the values themselves: no mean, so no rounding can fake a spread
    return (hi > lo)[group] | (count == 1)

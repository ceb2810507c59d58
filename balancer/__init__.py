"""Load balancers: the policy that orders workers for one dispatch.

A balancer only *selects*. The pool that drives it dispatches, retries,
and evicts; the balancer observes the pool through a read-only view and
cannot change it. This package imports nothing from ``pool``, so any pool
(``wool``'s included) can embed these balancers.

The protocol has the same shape as ``wool``'s ``LoadBalancerLike`` on
purpose: a balancer written for one pool works in the other.
"""

from __future__ import annotations

from ._priority import PriorityLoadBalancer as PriorityLoadBalancer
from ._protocol import LoadBalancerContextView as LoadBalancerContextView
from ._protocol import LoadBalancerLike as LoadBalancerLike
from ._protocol import NoWorkersAvailable as NoWorkersAvailable
from ._protocol import OrderedBalancer as OrderedBalancer
from ._round_robin import RoundRobinLoadBalancer as RoundRobinLoadBalancer

__all__ = [
    "LoadBalancerContextView",
    "LoadBalancerLike",
    "NoWorkersAvailable",
    "OrderedBalancer",
    "PriorityLoadBalancer",
    "RoundRobinLoadBalancer",
]

for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith("balancer."):
        _obj.__module__ = "balancer"
del _name, _obj

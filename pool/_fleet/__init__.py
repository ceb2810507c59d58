"""Capacity the pool starts itself: worker processes on this host, and where they come from.

_local_fleet   LocalFleet: keep a minimum, replace the dead, grow under load, stop
_local_worker  one spawned worker process: READY pipe, lifeline, stop, reap
_template      the pool's side of the worker template (fork requests, exit statuses)
_provision     Provisioner, WorkerRequest, SubprocessProvisioner, CommandProvisioner
_plan          ProvisionPlan: how many workers to request now (I/O-free)
_provisioning  Growth: the fleet or the provisioner, on overflow; pool_capacity wires both
"""

from __future__ import annotations

from ._provision import CommandProvisioner as CommandProvisioner
from ._provision import Provisioner as Provisioner
from ._provision import SubprocessProvisioner as SubprocessProvisioner
from ._provision import WorkerRequest as WorkerRequest
from ._provisioning import pool_capacity as pool_capacity

__all__ = ["CommandProvisioner", "Provisioner", "SubprocessProvisioner", "WorkerRequest", "pool_capacity"]

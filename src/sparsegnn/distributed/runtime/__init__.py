"""Running ranks: launching them, their session and process groups, lost peers, affinity.

The only code of sparsegnn that reads the torchrun environment (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``) and the only one that creates process groups;
:class:`~sparsegnn.distributed.runtime.comm.Communicator` counts every byte they carry.
"""

"""The network-namespace test bed: hosts made of namespaces and veth links (``netns``),
the documented torchrun launch on them (``launch``) and the fault scenarios run against
it (``faults``, ``chaos``). Shared by ``tests/cluster`` (which asserts) and the cluster
benchmarks (which measure), so neither imports the other. Needs root; nothing here is
part of the library.
"""

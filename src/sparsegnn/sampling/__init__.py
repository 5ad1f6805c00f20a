"""Matrix-based minibatch sampling: GraphSAGE, LADIES and ShaDow, k minibatches per call."""

from sparsegnn.sampling.loader import LoadedBatch, MinibatchLoader
from sparsegnn.sampling.samplers import (
    LadiesSampler,
    LocalTopology,
    Minibatch,
    NodeWiseSampler,
    SampledBatch,
    SampledSubgraph,
    Sampler,
    ShadowSampler,
    Topology,
    ladies_probabilities,
)
from sparsegnn.sampling.streams import batch_generator, epoch_permutation

__all__ = [
    "LadiesSampler",
    "LoadedBatch",
    "LocalTopology",
    "Minibatch",
    "MinibatchLoader",
    "NodeWiseSampler",
    "SampledBatch",
    "SampledSubgraph",
    "Sampler",
    "ShadowSampler",
    "Topology",
    "batch_generator",
    "epoch_permutation",
    "ladies_probabilities",
]

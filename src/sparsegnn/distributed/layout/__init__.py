"""Data layout: the grid shape, vertex blocks, each rank's shard, row blocks and the
partitioned folders they are read from.

Nothing here communicates; it decides which rows and tiles live on which rank.
"""

"""Planning without ranks: exact communication volumes, the byte and cost models,
calibration rates, the per-rank memory predictor and the automatic choice of a
distribution.
"""

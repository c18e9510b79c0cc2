"""Tuning ahead of time (``python -m triton_dejavu_like tune SPEC``): cases from a SPEC, run here, in
local worker processes (one per GPU) or on a Ray cluster, merged into one store."""

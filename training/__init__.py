"""Runnable fitting pipelines for emotional_memory: ``python -m training {fit,cv,evaluate}``."""

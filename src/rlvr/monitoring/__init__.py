"""Metrics, health rules, screening, held-out eval, sinks and reports."""

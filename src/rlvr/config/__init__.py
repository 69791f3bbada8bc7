"""Pydantic config models (no torch). One file per section; ``load.py`` reads YAML + --set overrides."""

"""Lip-sync engines behind one interface (``LipSyncEngine``) and their auto-selection."""

from studio.core.engines.base import EngineChoice, LipSyncEngine, available_engines, select_engine

__all__ = ["EngineChoice", "LipSyncEngine", "available_engines", "select_engine"]

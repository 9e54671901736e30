"""Lip-sync engines behind one interface (``LipSyncEngine``) and their auto-selection."""

from studio.core.engines.base import Availability, LipSyncEngine
from studio.core.engines.selection import EngineChoice, auto_engine, engine_status, select_engine

__all__ = ["Availability", "EngineChoice", "LipSyncEngine", "auto_engine", "engine_status", "select_engine"]

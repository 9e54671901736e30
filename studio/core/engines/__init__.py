"""Lip-sync engines behind one interface (``LipSyncEngine``) and their auto-selection."""

from studio.core.engines.base import (
    Availability,
    EngineChoice,
    LipSyncEngine,
    auto_engine,
    engine_status,
    select_engine,
)

__all__ = ["Availability", "EngineChoice", "LipSyncEngine", "auto_engine", "engine_status", "select_engine"]

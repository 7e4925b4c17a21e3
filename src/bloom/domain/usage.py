"""What an attempt cost: the usage figures a worker reports in a result's metrics, typed."""

from dataclasses import asdict, dataclass
from typing import Any

MAX_MODEL_CHARS = 128


@dataclass(frozen=True, slots=True)
class Usage:
    """Cost, tokens, turns, duration and model of one attempt; None where the worker said
    nothing (a result without usage is valid)."""

    cost_usd: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    tokens_used: int | None = None
    num_turns: int | None = None
    duration_ms: int | None = None
    model: str | None = None

    @classmethod
    def from_metrics(cls, metrics: dict[str, Any]) -> "Usage":
        """The figures of a result's metrics that have the right type (a count is an int, never
        a bool; a cost any number); anything else is left out, not guessed."""
        cost = metrics.get("cost_usd")
        model = metrics.get("model")
        return cls(
            cost_usd=_amount(cost),
            input_tokens=_count(metrics.get("input_tokens")),
            output_tokens=_count(metrics.get("output_tokens")),
            tokens_used=_count(metrics.get("tokens_used")),
            num_turns=_count(metrics.get("num_turns")),
            duration_ms=_count(metrics.get("duration_ms")),
            model=model[:MAX_MODEL_CHARS] if isinstance(model, str) and model else None,
        )

    def columns(self) -> dict[str, Any]:
        return asdict(self)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _amount(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

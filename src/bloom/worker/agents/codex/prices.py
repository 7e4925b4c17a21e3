"""What Codex's models cost, in one dated table: the CLI reports tokens, never a price.

USD per million tokens: input, cached input, output (reasoning tokens are output tokens, and
are counted in the CLI's `output_tokens`). A model not in the table has no cost (`None`): its
runs report tokens only, and a budget cannot stop them (docs/agents.md). A name is looked up
as it is, then by its longest prefix in the table (`gpt-5.1-codex-max` costs what
`gpt-5.1-codex` does), so a dated snapshot of a model costs what the model does.
"""

from dataclasses import dataclass

PRICES_AS_OF = "2026-05-13"
"""When the table was last checked against OpenAI's published prices (the API's price list;
the Codex rate card in credits, 25 credits = 1 USD): update both together."""


@dataclass(frozen=True, slots=True)
class Price:
    input: float
    cached_input: float
    output: float


PRICES: dict[str, Price] = {
    "gpt-5.5": Price(5.00, 0.50, 30.00),
    "gpt-5.4": Price(2.50, 0.25, 15.00),
    "gpt-5.4-mini": Price(0.75, 0.075, 4.52),
    "gpt-5.3-codex": Price(1.75, 0.175, 14.00),
    "gpt-5.2": Price(1.75, 0.175, 14.00),
    "gpt-5.2-codex": Price(1.75, 0.175, 14.00),
    "gpt-5.1": Price(1.25, 0.125, 10.00),
    "gpt-5.1-codex": Price(1.25, 0.125, 10.00),
    "gpt-5.1-codex-mini": Price(0.25, 0.025, 2.00),
    "gpt-5": Price(1.25, 0.125, 10.00),
    "gpt-5-codex": Price(1.25, 0.125, 10.00),
    "gpt-5-mini": Price(0.25, 0.025, 2.00),
    "gpt-5-nano": Price(0.05, 0.005, 0.40),
    "codex-mini-latest": Price(1.50, 0.375, 6.00),
    "o4-mini": Price(1.10, 0.275, 4.40),
    "o3": Price(2.00, 0.50, 8.00),
    "gpt-4.1": Price(2.00, 0.50, 8.00),
}


def price_of(model: str | None) -> Price | None:
    """The model's price: its own entry, else its longest prefix's, else None."""
    if not model:
        return None
    name = model.strip().lower()
    if name in PRICES:
        return PRICES[name]
    prefixes = [known for known in PRICES if name.startswith(known + "-")]
    return PRICES[max(prefixes, key=len)] if prefixes else None


def cost_usd(
    model: str | None, input_tokens: int, cached_tokens: int, output_tokens: int
) -> float | None:
    """What the tokens cost with `model` (`input_tokens` include the cached ones), or None for a
    model the table does not know."""
    price = price_of(model)
    if price is None:
        return None
    cached = min(max(cached_tokens, 0), max(input_tokens, 0))
    fresh = max(input_tokens, 0) - cached
    return (
        fresh * price.input + cached * price.cached_input + max(output_tokens, 0) * price.output
    ) / 1_000_000

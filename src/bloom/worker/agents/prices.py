"""What the models of the CLIs that report tokens but no price cost (Codex's, OpenAI's; the
Gemini CLI's, Google's), in one table, each vendor's part dated.

USD per million tokens: input, cached input, output (reasoning or thinking tokens are billed as
output tokens). A model not in the table has no cost (`None`): its runs report tokens only, and
a budget cannot stop them (docs/agents.md). A name is looked up as it is, then by its longest
prefix in the table (`gpt-5.1-codex-max` costs what `gpt-5.1-codex` does,
`gemini-2.5-flash-preview-09-2025` what `gemini-2.5-flash` does), so a dated snapshot of a model
costs what the model does. The Claude CLI reports its own cost.
"""

from dataclasses import dataclass

PRICES_AS_OF = "2026-05-13"
"""When OpenAI's part was last checked against its published prices (the API's price list;
the Codex rate card in credits, 25 credits = 1 USD): update both together."""
GEMINI_PRICES_AS_OF = "2025-12-01"
"""When Google's part was last checked against the Gemini API's published prices (paid tier,
prompts up to 200k tokens; a longer prompt costs more than this says)."""


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
    # Google (GEMINI_PRICES_AS_OF)
    "gemini-3-pro-preview": Price(2.00, 0.20, 12.00),
    "gemini-3-flash-preview": Price(0.50, 0.05, 3.00),
    "gemini-2.5-pro": Price(1.25, 0.125, 10.00),
    "gemini-2.5-flash": Price(0.30, 0.03, 2.50),
    "gemini-2.5-flash-lite": Price(0.10, 0.01, 0.40),
    "gemini-2.0-flash": Price(0.10, 0.025, 0.40),
    "gemini-2.0-flash-lite": Price(0.075, 0.075, 0.30),
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

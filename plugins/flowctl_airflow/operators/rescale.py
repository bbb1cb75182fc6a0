"""Rescale a pipeline by hand: the ``rescale_<pipeline>`` DAG's operator.

The request is either a ``direction`` (``up`` doubles, ``down`` halves the
ACTIVE topology's parallelism) or a ``target_parallelism`` (a power of two
within the pipeline's bounds), plus a ``reason`` that is stored with the
replacement event. The DAG's Params form rejects bad input first; the
operator validates again (a run triggered through the API or CLI with
another DAG version, or a templated value, must get the same clear message
naming the field and the allowed values), then runs the blue-green
replacement of :class:`BlueGreenReplaceOperator`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from flowctl.core.validation import InvalidValue, allowed_parallelisms, choice, parallelism
from flowctl_airflow.operators.blue_green import BlueGreenReplaceOperator

if TYPE_CHECKING:
    from airflow.sdk import Context

    from flowctl.adapters.control_plane import Topology
    from flowctl.pipelines.config import PipelineConfig

DIRECTIONS = ("up", "down")


class RescaleRequestError(ValueError):
    """A rescale request with a missing or bad field; the message names it and what is allowed."""


def _as_form_value(value: Any) -> Any:
    """A rendered template's text as the value the form held: ``""`` -> None, ``"8"`` -> 8.

    Templates render to text; without this a request with both fields set would be
    reported as ``target_parallelism='8'``, a number quoted as a string. Anything else
    stays as it is, for the checks to name.
    """
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text in ("", "None"):
        return None
    try:
        return int(text)
    except ValueError:
        return value


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip() in ("", "None"))


def validate_request(
    *,
    direction: Any,
    target_parallelism: Any,
    reason: Any,
    min_parallelism: int,
    max_parallelism: int,
) -> tuple[str | None, int | None, str]:
    """Check a request's fields alone: ``(direction, target, reason)``, one of the first two None.

    Exactly one of ``direction`` and ``target_parallelism`` must be given; ``reason`` is
    required. Raises :class:`RescaleRequestError` naming the field and the allowed values.
    """
    lo, hi = min_parallelism, max_parallelism
    allowed = allowed_parallelisms(lo, hi)
    if _blank(reason) or not isinstance(reason, str):
        raise RescaleRequestError(
            f"reason={reason!r}: a non-empty text saying why is required (it is stored with "
            f"the replacement event)"
        )
    has_direction, has_target = not _blank(direction), not _blank(target_parallelism)
    if has_direction == has_target:
        raise RescaleRequestError(
            f"give exactly one of direction (one of {', '.join(DIRECTIONS)}) and "
            f"target_parallelism (one of {allowed}); got direction={direction!r}, "
            f"target_parallelism={target_parallelism!r}"
        )
    try:
        if has_direction:
            wanted = choice("direction", direction, DIRECTIONS)
            return wanted, None, reason.strip()
        target = parallelism("target_parallelism", target_parallelism, lo, hi)
    except InvalidValue as exc:
        if exc.field == "direction":
            raise RescaleRequestError(
                f"direction={direction!r} is not allowed; allowed values: {', '.join(DIRECTIONS)}"
            ) from None
        raise RescaleRequestError(str(exc)) from None
    return None, target, reason.strip()


def resolve_rescale(
    *,
    direction: Any,
    target_parallelism: Any,
    reason: Any,
    current: int,
    min_parallelism: int,
    max_parallelism: int,
) -> tuple[int, str]:
    """The new parallelism and the reason of a request, or a :class:`RescaleRequestError`.

    ``current`` is the ACTIVE topology's parallelism; the result must differ from it and,
    for a direction, stay within the bounds.
    """
    lo, hi = min_parallelism, max_parallelism
    wanted, target, why = validate_request(
        direction=direction,
        target_parallelism=target_parallelism,
        reason=reason,
        min_parallelism=lo,
        max_parallelism=hi,
    )
    if wanted is not None:
        target = current << 1 if wanted == "up" else current >> 1
        if not lo <= target <= hi:
            limit = f"max_parallelism={hi}" if wanted == "up" else f"min_parallelism={lo}"
            raise RescaleRequestError(
                f"direction={wanted!r}: the topology runs {current} lanes, {target} would "
                f"cross {limit}"
            )
    assert target is not None
    if target == current:
        raise RescaleRequestError(
            f"target_parallelism={target} is the topology's current parallelism: nothing to do"
        )
    return target, why


class RescaleOperator(BlueGreenReplaceOperator):
    """Replace the pipeline's ACTIVE topology with the parallelism a person asked for.

    :param direction: ``up``, ``down`` or empty. (templated)
    :param target_parallelism: a power of two within the bounds, or empty. (templated)
    :param reason: why; required. (templated)
    Other keyword arguments go to :class:`BlueGreenReplaceOperator`.
    """

    template_fields: Sequence[str] = (
        *BlueGreenReplaceOperator.template_fields,
        "direction",
        "target_parallelism",
    )

    def __init__(
        self,
        *,
        direction: str | None = None,
        target_parallelism: int | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.direction = direction
        self.target_parallelism = target_parallelism

    def execute(self, context: Context) -> dict[str, Any]:
        self.direction = _as_form_value(self.direction)
        self.target_parallelism = _as_form_value(self.target_parallelism)
        config = self._config()
        # The request's own fields first: a bad form is reported before anything is read.
        validate_request(
            direction=self.direction,
            target_parallelism=self.target_parallelism,
            reason=self.reason,
            min_parallelism=config.min_parallelism,
            max_parallelism=config.max_parallelism,
        )
        self.decision = None
        return super().execute(context)

    def _target(self, blue: Topology, config: PipelineConfig) -> tuple[int, str, Any]:
        """The request resolved against the ACTIVE topology: its target is the replacement's."""
        target, reason = resolve_rescale(
            direction=self.direction,
            target_parallelism=self.target_parallelism,
            reason=self.reason,
            current=blue.parallelism,
            min_parallelism=config.min_parallelism,
            max_parallelism=config.max_parallelism,
        )
        self.log.info(
            "rescale %s: %s runs %d lanes -> %d (%s)",
            self.pipeline,
            blue.topology_id,
            blue.parallelism,
            target,
            reason,
        )
        return target, reason, None

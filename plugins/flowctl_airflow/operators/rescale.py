"""Rescale a pipeline by hand: the ``rescale_<pipeline>`` DAG's operator.

The DAG's form has one field, ``change``: ``up`` (double the ACTIVE
topology's parallelism), ``down`` (halve it) or one of the allowed
parallelisms (powers of two within the pipeline's bounds), so no combination
of fields can contradict another; plus a ``reason`` that is stored with the
replacement event. The Params schema refuses any other value when the run is
triggered (the form, the REST API, the CLI). Both default to null, so the form
marks neither as an error before it is touched and a run without them reaches
the operator, which says what is missing: ``change`` with its allowed values,
or ``reason``. A conf with the old form's keys (:data:`RENAMED_CONF_KEYS`) is
refused first, answered with ``change`` (:mod:`flowctl_airflow.run_conf`). The operator takes
the request as a ``direction`` or a ``target_parallelism`` (what a replacement
records) and validates again (a run of another DAG version, or a templated
value, must get the same clear message naming the field and the allowed
values), then runs the blue-green replacement of :class:`BlueGreenReplaceOperator`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from flowctl.core.validation import InvalidValue, allowed_parallelisms, choice, parallelism
from flowctl_airflow.operators.blue_green import BlueGreenReplaceOperator
from flowctl_airflow.run_conf import refuse_unknown_conf

if TYPE_CHECKING:
    from airflow.sdk import Context

    from flowctl.adapters.control_plane import Topology
    from flowctl.core.scaling import Decision
    from flowctl.pipelines.config import PipelineConfig

DIRECTIONS = ("up", "down")
#: The rescale DAG's former conf keys (its two-field form), each answered with the field
#: that replaced it when a run's conf still gives it.
RENAMED_CONF_KEYS = {"direction": "change", "target_parallelism": "change"}


class RescaleRequestError(ValueError):
    """A rescale request with a missing or bad field; the message names it and what is allowed."""


def change_choices(min_parallelism: int, max_parallelism: int) -> list[str | int]:
    """The values of the form's ``change`` field: the directions, then each parallelism."""
    return [*DIRECTIONS, *allowed_parallelisms(min_parallelism, max_parallelism)]


def change_labels(min_parallelism: int, max_parallelism: int) -> dict[str, str]:
    """How the form's dropdown shows each ``change`` value (keyed by its text; ``null``: the
    untouched field's)."""
    lanes = allowed_parallelisms(min_parallelism, max_parallelism)
    return {
        "null": "(choose: up, down or a number of lanes)",
        "up": "up (double)",
        "down": "down (halve)",
        **{str(p): f"{p} lane{'s' if p > 1 else ''}" for p in lanes},
    }


def split_change(change: object) -> tuple[str | None, int | None]:
    """``change`` (as the form held it, or its rendered text) as ``(direction, target)``.

    ``up``/``down`` is a direction; a whole number is a target parallelism, whose
    bounds :func:`validate_request` checks. Anything else raises
    :class:`RescaleRequestError` naming ``change`` and what it may be.
    """
    value = _as_form_value(change)
    if value in DIRECTIONS:
        return value, None
    if isinstance(value, int) and not isinstance(value, bool):
        return None, value
    raise RescaleRequestError(
        f"change={change!r} is not allowed; allowed values: {', '.join(DIRECTIONS)} or a "
        f"parallelism (a power of two within the pipeline's bounds)"
    )


def _as_form_value(value: object) -> object:
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


def _blank(value: object) -> bool:
    return value is None or (isinstance(value, str) and value.strip() in ("", "None"))


def validate_request(
    *,
    direction: object,
    target_parallelism: object,
    reason: object,
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
    direction: object,
    target_parallelism: object,
    reason: object,
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

    :param change: the form's one field: ``up``, ``down`` or a parallelism; or empty,
        and then ``direction`` or ``target_parallelism``. (templated)
    :param direction: ``up``, ``down`` or empty. (templated)
    :param target_parallelism: a power of two within the bounds, or empty. (templated)
    :param reason: why; required. (templated)
    Other keyword arguments go to :class:`BlueGreenReplaceOperator`.
    """

    template_fields: Sequence[str] = (
        *BlueGreenReplaceOperator.template_fields,
        "change",
        "direction",
        "target_parallelism",
    )

    def __init__(
        self,
        *,
        change: str | int | None = None,
        direction: str | None = None,
        target_parallelism: int | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.change = change
        # Rendered templates, read as the form's values (_as_form_value) before the checks.
        self.direction: object = direction
        self.target_parallelism: object = target_parallelism

    def execute(self, context: Context) -> dict[str, Any]:
        refuse_unknown_conf(context, RENAMED_CONF_KEYS)  # the old form's keys name `change`
        self.direction = _as_form_value(self.direction)
        self.target_parallelism = _as_form_value(self.target_parallelism)
        config = self._config()
        if _blank(self.change) and _blank(self.direction) and _blank(self.target_parallelism):
            allowed = allowed_parallelisms(config.min_parallelism, config.max_parallelism)
            raise RescaleRequestError(
                f"change is missing: give up (double), down (halve) or a number of lanes, "
                f"one of {allowed}"
            )
        if not _blank(self.change):
            if not (_blank(self.direction) and _blank(self.target_parallelism)):
                raise RescaleRequestError(
                    f"give change={self.change!r} alone; got also direction="
                    f"{self.direction!r}, target_parallelism={self.target_parallelism!r}"
                )
            self.direction, self.target_parallelism = split_change(self.change)
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

    def _target(self, blue: Topology, config: PipelineConfig) -> tuple[int, str, Decision | None]:
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

"""The JSON of ``attnpool serve``: pydantic models of the requests and answers, and errors that say what and where.

The models are built for the model being served (:func:`build_models`): a row's fields are exactly the run's text
fields (strings; unknown fields are refused) and a prediction has the type of its task, so the OpenAPI schema
(``GET /openapi.json``) documents them by name (pydantic comes from :mod:`attnpool.serving.web`, at call time).
Validation errors become one line per problem, ``rows[3].target: missing``, under ``{"error": ..., "details":
[...]}``; ``details`` lists the first :data:`MAX_DETAILS` problems (the error says how many more), and an object
with over :data:`MAX_DETAILS` unknown fields is one problem, so that a body cannot make a huge answer, nor keep
the server's event loop busy describing it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from attnpool.serving import web
from attnpool.serving.service import Job, Service

_JSON_TYPES = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "an array",
               dict: "an object", type(None): "null"}
_UNION_TAGS = ("str", "int")  # pydantic names the member of a union that failed: rows[0].id.str
MAX_DETAILS = 20  # problems described in an error's details; more are counted
_TOO_MANY_FIELDS = "too_many_unknown_fields"


@dataclass(frozen=True)
class Models:
    """The pydantic models of one server: its request body, its answer and its errors (for the OpenAPI schema)."""

    request: Any  # the body of POST /predict
    response: Any  # its answer
    error: Any  # every 4xx and 5xx answer
    health: Any  # GET /health


def build_models(service: Service, max_rows: int) -> Models:
    """The models for ``service``: a row's fields are its text fields, a prediction has its task's type."""
    f, strict_str, strict_int = web.Field, web.StrictStr, web.StrictInt
    chars = service.max_text_chars
    fields: dict[str, Any] = {}
    for i, name in enumerate(service.fields):
        fields[f"field_{i}"] = (strict_str, f(alias=name, max_length=chars, description=(
            f"text field {name!r}, as in the run's training data (at most {chars} characters; longer than "
            f"{service.max_length} tokens is truncated, as predict does)")))
    for i, name in enumerate(service.optional_fields):
        fields[f"optional_{i}"] = (strict_str | None, f(None, alias=name, max_length=chars, description=(
            f"optional text field {name!r}: with it the row is a text pair")))
    if service.id_field:
        row_id = Annotated[strict_str | strict_int | None, web.AfterValidator(_encodable)]
        fields["row_id"] = (row_id, f(None, alias=service.id_field, description=(
            "an id for the row, returned with its prediction")))
    optional = f" (optional: {', '.join(service.optional_fields)})" if service.optional_fields else ""
    row = web.create_model("Row", __config__=web.ConfigDict(extra="forbid"), **fields,
                           __doc__=f"One row: the fields {', '.join(service.fields)}{optional}.",
                           __validators__={"few_unknown": _few_unknown_fields(service.fields, service.optional_fields,
                                                                              service.id_field)})
    request = web.create_model(
        "PredictRequest", __config__=web.ConfigDict(extra="forbid"), __doc__="The body of POST /predict.",
        __validators__={"few_unknown": _few_unknown_fields(["rows", "weights"])},
        rows=(list[row], f(min_length=1, max_length=max_rows, description=f"1 to {max_rows} rows")),
        weights=(web.StrictBool, f(False, description="also return each row's words with their pooling weights, "
                                                      "merged from sub-word pieces as attnpool explain does")))
    word = web.create_model(
        "WordWeight", __doc__="A word of the input (its sub-word pieces merged) or a special token, with its weight.",
        text=(str, f(description="the word as written in the input, or the special token")),
        kind=(str, f(description="'word' or 'special' ([CLS], [SEP], <s>...: never merged into a word)")),
        segment=(int | None, f(description="0: the text, 1: the second text of a pair; null: added tokens")),
        start=(int | None, f(description="character offset of the word in its segment's text")),
        end=(int | None, f(description="character offset where the word ends")),
        pieces=(list[str], f(description="the tokens the word is made of")),
        weight=(float, f(description="its pooling weight, summed over its pieces, mean over heads; the words of a "
                                     "row (special tokens included) sum to 1")),
        weights=(list[float], f(description="the weight per pooler head")))
    prediction = web.create_model(
        "RowPrediction", __doc__="One row's answer: what attnpool predict writes for it.",
        id=(strict_str | strict_int | None, f(None, description="the row's id, when the request gave one")),
        prediction=_prediction_field(service),
        probabilities=(dict[str, float] | None, f(None, description=(
            "classification: the probability of each class" + _classes(service)))),
        words=(list[word] | None, f(None, description='with "weights": true, the words and their weights')))
    response = web.create_model(
        "PredictResponse", __doc__="The answer of POST /predict: one prediction per row, in request order.",
        task=(str, f(description="regression, binary, multiclass or multilabel")),
        folds=(list[int], f(description="the fold models ensembled (empty for a single saved model)")),
        id2label=(dict[str, str] | None, f(None, description="classification: the class of each output index")),
        predictions=(list[prediction], f(description="one per row, in request order")))
    detail = web.create_model("ErrorDetail", __doc__="One problem of a request.",
                              where=(str, f(description="the place in the request, e.g. rows[3].target")),
                              what=(str, f(description="what is wrong there")))
    error = web.create_model("ErrorResponse", __doc__="Every 4xx and 5xx answer.",
                             error=(str, f(description="what went wrong, in one line")),
                             details=(list[detail] | None, f(None, description=(
                                 f"one per problem of an invalid request (the first {MAX_DETAILS})"))))
    health = web.create_model("Health", __doc__="GET /health.", status=(str, f(description=(
        "'ready' (200); 'draining' (503) once the server is shutting down; or why the batcher that runs the "
        "requests is not running (503)"))))
    return Models(request, response, error, health)


def _few_unknown_fields(*names: Sequence[str] | str | None) -> Any:
    """A validator refusing an object with over :data:`MAX_DETAILS` unknown fields as one problem.

    ``extra="forbid"`` makes one error per unknown field: a 1 MB body of 76,000 keys took seconds to describe.
    """
    known = {name for group in names if group for name in ([group] if isinstance(group, str) else group)}

    def check(cls: Any, data: Any) -> Any:
        if isinstance(data, dict) and len(data) > MAX_DETAILS:
            unknown = [key for key in data if key not in known]
            if len(unknown) > MAX_DETAILS:
                raise web.PydanticCustomError(_TOO_MANY_FIELDS, "{count} unknown fields",
                                              {"count": len(unknown), "first": ", ".join(map(_shown, unknown[:3]))})
        return data

    return web.model_validator(mode="before")(check)


def _shown(key: Any, limit: int = 40) -> str:
    """A key as the answer quotes it: a lone surrogate escaped (it cannot be written: a 500), a long one cut."""
    text = str(key).encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= limit else f"{text[:limit]}..."


def _encodable(value: Any) -> Any:
    """Refuse an id holding a lone surrogate (valid JSON: a backslash-u escape from D800 to DFFF without its pair).

    Echoed in the answer, such an id could not be written (a 500). A text's length limit makes pydantic refuse one
    (``string_unicode``); an id has no limit, so it is checked here, with the same error.
    """
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as err:
            raise web.PydanticCustomError("string_unicode", "not valid Unicode") from err
    return value


def _classes(service: Service) -> str:
    return f" ({', '.join(map(str, service.classes))})" if service.classes else ""


def _prediction_field(service: Service) -> tuple[Any, Any]:
    if service.task == "regression":
        several = service.ensemble.models[0].config.num_labels > 1
        return (list[float] if several else float), web.Field(description=(
            "the predicted value of each target" if several else "the predicted value"))
    if service.task == "multilabel":
        return str, web.Field(description="the labels at probability >= 0.5 joined by '|', as predict writes them"
                              + _classes(service))
    return str | int, web.Field(description="the predicted class" + _classes(service))


def row_values(row: Any, service: Service) -> tuple[dict[str, str | None], Any]:
    """A validated row's text fields (by their names) and its id."""
    values = row.model_dump(by_alias=True)
    texts = {name: values.get(name) for name in (*service.fields, *service.optional_fields)}
    return texts, values.get(service.id_field) if service.id_field else None


def no_tokens(job: Job, rows: Sequence[dict[str, str | None]], service: Service) -> str | None:
    """Why ``job`` cannot be scored: rows that tokenise to no tokens at all, else ``None``.

    An empty text, with a tokenizer that adds no special tokens (a decoder's), leaves a row of zero tokens, which
    the model would answer with 0 as if it had read something; ``predict`` only logs such rows.
    """
    # each run's tokens of the rows, and (context view both) those without their group context, averaged in too
    views = [view for part in (job.parts or [job]) for view in (part.encodings, part.bare) if view is not None]
    empty = sorted({i for view in views for i, ids in enumerate(view["input_ids"]) if len(ids) == 0})
    if not empty:
        return None
    first = empty[0]
    names = [*service.fields, *(f for f in service.optional_fields if rows[first].get(f) is not None)]
    place = f"rows[{first}].{names[0]}" if len(names) == 1 else f"rows[{first}] ({', '.join(names)})"
    more = f"; and {len(empty) - 1} more row(s) like it" if len(empty) > 1 else ""
    return (f"{place}: no tokens after tokenisation: the text is empty (or holds only what the tokenizer drops) and "
            f"the model's tokenizer adds no special tokens, so the model has nothing to read; send some text{more}")


def where(loc: Sequence[Any]) -> str:
    """``("body", "rows", 3, "target")`` -> ``rows[3].target``."""
    parts = list(loc[1:] if loc and loc[0] == "body" else loc)
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


def describe(errors: Sequence[dict[str, Any]], service: Service,
             limit: int = MAX_DETAILS) -> tuple[int, list[dict[str, str]], int]:
    """The status (400 for malformed JSON, else 422), the details and how many problems they leave out.

    The details are one ``{"where", "what"}`` per validation error, for the first ``limit`` only: the others are
    counted, not described.
    """
    details, status, seen = [], 422, set()
    for error in errors:
        kind, ctx, value = error.get("type", ""), error.get("ctx") or {}, error.get("input")
        loc = tuple(error.get("loc", ()))
        if kind in ("string_type", "int_type") and loc and loc[-1] in _UNION_TAGS:  # the id: a string or an integer
            loc, kind = loc[:-1], "id_type"
        if (loc, kind) in seen:
            continue
        seen.add((loc, kind))
        if len(details) >= limit:  # counted, not described
            continue
        place = where(loc)
        if kind == "json_invalid":
            status, place = 400, "body"
            what = f"malformed JSON ({ctx.get('error', 'decode error')} at character {loc[-1]})"
        elif kind == "id_type":
            got = "a decimal number" if isinstance(value, float) else _JSON_TYPES.get(type(value), type(value).__name__)
            what = f"must be a string or an integer, got {got}"
        elif kind == "extra_forbidden" and len(loc) <= 2:  # ("body", name): a field of the body, not of a row
            what = "unknown field; a body takes rows and weights"
        elif kind == _TOO_MANY_FIELDS:
            what = (f"{ctx.get('count')} unknown fields ({ctx.get('first')}...); "
                    + ("a body takes rows and weights" if len(loc) <= 1 else _row_fields(service)))
        else:
            what = _what(kind, ctx, value, error.get("msg", ""), service)
        details.append({"where": place, "what": what})
    return status, details, len(seen) - len(details)


def _row_fields(service: Service) -> str:
    optional = [*service.optional_fields, *([service.id_field] if service.id_field else [])]
    return f"a row takes {', '.join(service.fields)}" + (f" (optional: {', '.join(optional)})" if optional else "")


def _what(kind: str, ctx: dict[str, Any], value: Any, message: str, service: Service) -> str:
    got = _JSON_TYPES.get(type(value), type(value).__name__)
    if kind == "missing":
        return "missing"
    if kind == "extra_forbidden":
        return f"unknown field; {_row_fields(service)}"
    if kind == "string_type":
        return f"must be a string, got {got}"
    if kind == "string_unicode":
        return ("must be valid Unicode text: it holds a lone surrogate (\\ud800 to \\udfff without its pair), which "
                "has no UTF-8 encoding")
    if kind == "bool_type":
        return f"must be true or false, got {got}"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return f"must be an object, got {got}"
    if kind == "list_type":
        return f"must be an array of rows, got {got}"
    if kind == "too_short":
        return "empty: give at least one row"
    if kind == "too_long":
        return f"{ctx.get('actual_length')} rows, at most {ctx.get('max_length')} per request (--max-rows)"
    if kind == "string_too_long":
        return (f"{len(value) if isinstance(value, str) else '?'} characters, at most {ctx.get('max_length')}: far "
                f"over the {service.max_length} tokens the model reads (texts over {service.max_length} tokens are "
                "truncated, as predict does; one this long is refused)")
    if kind.endswith("_type"):
        return f"wrong type: {message[:1].lower()}{message[1:]}, got {got}"
    return message

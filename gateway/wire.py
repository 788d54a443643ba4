"""The System One request and response shapes (../shared/wire-spec.md), as pydantic v2 models.

Schema errors come out of pydantic already in FastAPI's 422 shape; checks a schema cannot
express live in gateway/checks.py and use the short error form.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

Text = Annotated[str, StringConstraints(strip_whitespace=True, max_length=8000)]
Rich = Union[Text, dict[str, Any], list[Any], None]  # instructions / descriptions / levels


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NoulCriteria(_Strict):
    true: Rich = None
    false: Rich = None


class NoulQuestion(_Strict):
    type: Literal["noul"]
    instructions: Rich = None
    criteria: NoulCriteria | None = None


Question = Annotated[Union[NoulQuestion], Field(discriminator="type")]


class DecisionRequest(_Strict):
    model: Annotated[str, StringConstraints(min_length=1)]
    state: Union[str, dict[str, Any], list[Any]]
    questions: Annotated[dict[str, Question], Field(min_length=1)]


class NoulAnswer(BaseModel):
    type: Literal["noul"] = "noul"
    noul: float


class Usage(BaseModel):
    input_tokens: int
    output_tokens: int = 0


class DecisionResponse(BaseModel):
    model: str
    answers: dict[str, NoulAnswer]
    usage: Usage


class ModelCard(BaseModel):
    name: str
    description: str
    release_date: str


class ModelList(BaseModel):
    models: list[ModelCard]

"""Prompt texts from the profile's templates: one shared prefix, one suffix per yes/no job."""
from __future__ import annotations

from gateway.prompts import render, render_value
from gateway.wire import validate
from shared.profiles import load_profile

PROFILE = load_profile("gemma-3-270m")


def rendered(questions: dict, state="The state.") -> tuple[str, list[str], list]:
    r = render(PROFILE, validate({"model": "jev-latest", "state": state, "questions": questions}))
    return r.prefix, r.suffixes, r.spans


def test_object_state_is_indented_json_with_key_order_kept():
    prefix, _, _ = rendered({"q": {"type": "noul"}}, state={"z": 1, "a": ["ü", None]})
    assert prefix == PROFILE.preamble + PROFILE.prefix.format(state='{\n "z": 1,\n "a": [\n  "ü",\n  null\n ]\n}')


def test_string_state_is_stripped():
    assert render_value("  text \n") == "text"


def test_noul_without_instructions_asks_the_default_question():
    for question in ({"type": "noul"}, {"type": "noul", "instructions": "  "}, {"type": "noul", "instructions": None}):
        _, suffixes, _ = rendered({"q": question})
        assert suffixes == [PROFILE.suffix.format(question=PROFILE.default_question)]


def test_noul_criteria_texts_are_added_to_the_question():
    _, (suffix,), _ = rendered({"q": {"type": "noul", "instructions": "Refund?", "criteria": {
        "true": "wants money back", "false": {"not": "a refund"}}}})
    assert "Refund?" + PROFILE.true_means.format(text="wants money back") in suffix
    assert PROFILE.false_means.format(text='{\n "not": "a refund"\n}') in suffix


def test_choice_is_one_suffix_per_option_sharing_the_state_prefix():
    prefix, suffixes, spans = rendered({"team": {"type": "choice", "instructions": "Which team?",
                                                 "criteria": {"billing": "payments, refunds", " tech ": None}}})
    assert prefix.endswith(PROFILE.prefix.format(state="The state."))
    assert suffixes == [
        PROFILE.suffix.format(question=PROFILE.choice_question.format(
            instructions="Which team?", option=PROFILE.option_described.format(name="billing", text="payments, refunds"))),
        PROFILE.suffix.format(question=PROFILE.choice_question.format(instructions="Which team?", option="tech")),
    ]
    assert spans == [("team", 0, 2)]


def test_score_is_one_threshold_suffix_per_level_above_the_lowest():
    _, suffixes, spans = rendered({"anger": {"type": "score", "criteria": ["calm", "annoyed", "furious"]}})
    assert suffixes == [PROFILE.suffix.format(question=PROFILE.score_question.format(
        instructions=PROFILE.score_default, level=level)) for level in ("annoyed", "furious")]
    assert spans == [("anger", 0, 2)]


def test_mixed_questions_keep_request_order_in_their_spans():
    _, suffixes, spans = rendered({
        "n": {"type": "noul"},
        "s": {"type": "score", "criteria": ["a", "b", "c", "d"]},
        "c": {"type": "choice", "criteria": {"x": None, "y": None}},
    })
    assert spans == [("n", 0, 1), ("s", 1, 4), ("c", 4, 6)] and len(suffixes) == 6


def test_templates_come_from_the_profile_not_the_code():
    for template in (PROFILE.choice_question, PROFILE.score_question):
        assert "{instructions}" in template
    assert "{option}" in PROFILE.choice_question and "{level}" in PROFILE.score_question

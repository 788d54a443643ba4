"""`jevfleet decide`: the server's answers and errors for request files, without a server."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from client.net import http, post_json
from shared.config import PROJECT_ROOT

MIXED = {
    "model": "jev-latest",
    "state": "I was charged twice for the same order.",
    "questions": {
        "billing": {"type": "noul", "instructions": "Is this a billing problem?"},
        "team": {"type": "choice", "instructions": "Which team should handle it?",
                 "criteria": {"billing": "payments, refunds", "tech": None}},
        "anger": {"type": "score", "instructions": "How upset is the customer?",
                  "criteria": ["calm", "annoyed", "furious"]},
    },
}
INVALID = {"model": "gpt-4", "state": "x", "questions": {"q": {"type": "noul"}}}


def decide(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jevfleet", "decide", *args], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.fleet
def test_a_request_file_gets_the_servers_answer(fleet, tmp_path):
    request = tmp_path / "req.json"
    request.write_text(json.dumps(MIXED))
    out = decide(str(request))
    assert out.returncode == 0, out.stderr
    status, _, served = post_json(fleet.url + "/v1/systemone", MIXED)
    assert status == 200
    assert out.stdout == json.dumps(served, indent=2, ensure_ascii=False) + "\n"


@pytest.mark.fleet
def test_an_invalid_request_prints_the_servers_error_body_and_exits_1(fleet, tmp_path):
    request = tmp_path / "bad.json"
    request.write_text(json.dumps(INVALID))
    out = decide(str(request))
    status, _, raw = http("POST", fleet.url + "/v1/systemone", request.read_bytes(),
                          {"Content-Type": "application/json"})
    assert (out.returncode, status) == (1, 422)
    assert out.stdout == ""
    assert out.stderr.splitlines()[-1].encode() == raw


def test_an_existing_output_file_is_never_overwritten(tmp_path):
    request, output = tmp_path / "req.json", tmp_path / "answer.json"
    request.write_text(json.dumps(MIXED))
    output.write_text("keep me")
    out = decide(str(request), "--output", str(output))
    assert out.returncode == 1 and "exists" in out.stderr
    assert output.read_text() == "keep me"


@pytest.mark.model
def test_output_file_gets_the_printed_answer(tmp_path):
    request, output = tmp_path / "req.json", tmp_path / "answer.json"
    request.write_text(json.dumps(MIXED))
    out = decide(str(request), "--output", str(output))
    assert out.returncode == 0, out.stderr
    assert output.read_text() == out.stdout
    assert list(json.loads(out.stdout)["answers"]) == ["billing", "team", "anger"]


def jsonl_requests() -> list[str]:
    states = ["The parcel arrived broken.", "My card was charged twice.", "The app will not start."]
    lines = [json.dumps({"model": "jev-latest", "state": states[i % 3],
                         "questions": {"q": {"type": "noul", "instructions": f"Question {i}: is it urgent?"}}})
             for i in range(7)]
    lines.insert(3, json.dumps(INVALID))
    lines.insert(5, "{not json")
    return lines


@pytest.mark.model
def test_jsonl_answers_every_line_in_order_and_resumes(tmp_path):
    requests, output = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    requests.write_text("\n".join(jsonl_requests()) + "\n")
    first = decide("--jsonl", str(requests), "--output", str(output))
    assert first.returncode == 0, first.stderr
    answers = [json.loads(line) for line in output.read_text().splitlines()]
    assert len(answers) == 9
    assert [("error" in a) for a in answers] == [False, False, False, True, False, True, False, False, False]
    assert answers[3]["error"]["detail"][0]["loc"] == ["body", "model"]
    assert answers[5]["error"]["detail"][0]["type"] == "json_invalid"
    assert "decide" in first.stderr  # the progress bar went to stderr

    # A run killed mid-write: four complete lines and a torn fifth. The re-run adds only the rest.
    lines = output.read_text().splitlines(keepends=True)
    output.write_text("".join(lines[:4]) + lines[4][:10])
    again = decide("--jsonl", str(requests), "--output", str(output))
    assert again.returncode == 0, again.stderr
    assert "5 answered, 4 already" in again.stderr
    assert output.read_text() == "".join(lines)

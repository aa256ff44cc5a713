"""AWS's server-side checks as the emulator (and every in-process test client) applies them.

The service models' patterns are Java regular expressions matched against the whole value; the
differences from Python's ``re`` that decide whether a request is accepted are each pinned here.
"""

from __future__ import annotations

import botocore.session
import pytest

from remote_debug.emulator.constraints import constraint_errors, java_pattern, validation_message

SERVICES = ("sagemaker", "ssm", "logs", "s3", "sts", "iam")


def test_every_pattern_of_the_services_we_call_compiles() -> None:
    session = botocore.session.get_session()
    count = 0
    for service in SERVICES:
        model = session.get_service_model(service)
        for name in model.shape_names:
            pattern = model.shape_for(name).metadata.get("pattern")
            if pattern:
                java_pattern(pattern)
                count += 1
    assert count > 500


@pytest.mark.parametrize("terminator", ["\n", "\r", "\u0085", "\u2028", "\u2029"])
def test_dot_matches_no_java_line_terminator(terminator: str) -> None:
    assert java_pattern(".*").fullmatch(f"a{terminator}b") is None
    assert java_pattern("[\\S\\s]*").fullmatch(f"a{terminator}b") is not None  # what Environment values allow


def test_a_pattern_must_match_the_whole_value() -> None:
    name = java_pattern("[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")
    assert name.fullmatch("job-1") is not None
    assert name.fullmatch("job-1_x") is None  # re.match would accept the prefix


def test_unicode_properties_but_ascii_shorthands() -> None:
    tag = java_pattern("([\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]*)")
    assert tag.fullmatch("équipe ünö 42") is not None
    assert tag.fullmatch("a;b") is None
    assert java_pattern("\\w+").fullmatch("é") is None  # Java's \w is [a-zA-Z0-9_]
    assert java_pattern("[\\w-_]+").fullmatch("a-_") is not None  # a "-" after a class escape is literal
    assert java_pattern("[\\u0020-\\uD7FF\\uE000-\\uFFFD\\uD800\\uDC00-\\uDBFF\\uDFFF\\t]*").fullmatch("a\U0001f600")


def test_the_message_names_every_member_as_aws_does() -> None:
    shape = (
        botocore.session.get_session().get_service_model("sagemaker").operation_model("CreateTrainingJob").input_shape
    )
    errors = constraint_errors(
        shape,
        {
            "TrainingJobName": "bad_name",
            "Environment": {"OK": "multi\nline values are fine", "1BAD": "x", "LONG": "y" * 513},
            "HyperParameters": {"k": "a\nb"},
        },
    )
    env = f"{{OK=multi\nline values are fine, 1BAD=x, LONG={'y' * 513}}}"
    assert validation_message(errors) == (  # in the model's member order, as the service reports them
        "4 validation errors detected: "
        "Value 'bad_name' at 'trainingJobName' failed to satisfy constraint: Member must satisfy regular "
        "expression pattern: [a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}; "
        "Value '{k=a\nb}' at 'hyperParameters' failed to satisfy constraint: Map value must satisfy constraint: "
        "[Member must satisfy regular expression pattern: .*]; "
        f"Value '{env}' at 'environment' failed to satisfy constraint: Map keys must satisfy constraint: "
        "[Member must satisfy regular expression pattern: [a-zA-Z_][a-zA-Z0-9_]*]; "
        f"Value '{env}' at 'environment' failed to satisfy constraint: Map value must satisfy constraint: "
        "[Member must have length less than or equal to 512]"
    )

"""Extraction cases for the layout benchmark: a short document, the schema a user would
write for it (no `additionalProperties`, as most real schemas), and the values a correct
extraction holds."""

from __future__ import annotations

from typing import Any


def _obj(props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props)}


S, INT, N = {"type": "string"}, {"type": "integer"}, {"type": "number"}
LIST = {"type": "array", "items": S}

CASES: list[dict[str, Any]] = [
    {
        "name": "discharge",
        "text": "Discharge summary. Patient: Anita Sharma, age 62. Admitted 2026-03-04 with chest pain; troponin "
        "normal throughout. Discharged 2026-03-06 on aspirin 75mg daily and atorvastatin 20mg nightly. "
        "Cardiology follow-up in six weeks.",
        "schema": _obj(
            {
                "patient": S,
                "age": INT,
                "admitted": S,
                "discharged": S,
                "medications": LIST,
                "followup_weeks": INT,
            }
        ),  # fmt: skip
        "expect": {
            "patient": "Anita Sharma",
            "age": 62,
            "admitted": "2026-03-04",
            "discharged": "2026-03-06",
            "followup_weeks": 6,
        },  # fmt: skip
    },
    {
        "name": "ticket",
        "text": "Ticket #5531 from Jonas Berg (jonas.berg@example.org): the VPN client crashes on startup since "
        "this morning's update. Priority: high. Product: SecureLink 4.2.",
        "schema": _obj(
            {
                "ticket": INT,
                "customer": S,
                "email": S,
                "priority": {"enum": ["low", "normal", "high"]},
                "product": S,
            }
        ),  # fmt: skip
        "expect": {
            "ticket": 5531,
            "customer": "Jonas Berg",
            "email": "jonas.berg@example.org",
            "priority": "high",
            "product": "SecureLink 4.2",
        },  # fmt: skip
    },
    {
        "name": "contact",
        "text": "Please call Priya Nair, office manager at Lakeside Dental, on +44 20 7946 0321. She is in the "
        "office Monday to Thursday.",
        "schema": _obj({"name": S, "role": S, "company": S, "phone": S}),
        "expect": {
            "name": "Priya Nair",
            "role": "office manager",
            "company": "Lakeside Dental",
            "phone": "+44 20 7946 0321",
        },  # fmt: skip
    },
    {
        "name": "order",
        "text": "Order 88-1204 placed on 2026-01-19 by Tomás Ruiz: 3 boxes of nitrile gloves. Ship to "
        "Calle Mayor 12, Madrid. Paid by card.",
        "schema": _obj(
            {
                "order": S,
                "date": S,
                "customer": S,
                "quantity": INT,
                "item": S,
                "city": S,
                "payment": {"enum": ["card", "cash", "invoice"]},
            }
        ),  # fmt: skip
        "expect": {
            "order": "88-1204",
            "date": "2026-01-19",
            "customer": "Tomás Ruiz",
            "quantity": 3,
            "city": "Madrid",
            "payment": "card",
        },  # fmt: skip
    },
    {
        "name": "lab",
        "text": "Lab report for patient ID 40117. Haemoglobin 13.2 g/dL, white cell count 7.1, platelets 250. "
        "Sample taken 2026-02-11. Reviewed by Dr. Okafor.",
        "schema": _obj(
            {
                "patient_id": INT,
                "haemoglobin": N,
                "white_cells": N,
                "platelets": INT,
                "sampled": S,
                "reviewer": S,
            }
        ),  # fmt: skip
        "expect": {
            "patient_id": 40117,
            "haemoglobin": 13.2,
            "white_cells": 7.1,
            "platelets": 250,
            "sampled": "2026-02-11",
        },  # fmt: skip
    },
    {
        "name": "meeting",
        "text": "The budget review moves to Thursday 2026-05-14 at 15:00 in room B2. Attendees: Lena, Omar "
        "and Sofia.",
        "schema": _obj({"title": S, "date": S, "time": S, "room": S, "attendees": LIST}),
        "expect": {
            "date": "2026-05-14",
            "time": "15:00",
            "room": "B2",
            "attendees": ["Lena", "Omar", "Sofia"],
        },
    },
    {
        "name": "lease",
        "text": "The lease for unit 4C at 19 Harbour Road starts on 2026-07-01 for 12 months at 1450 EUR per "
        "month. Tenant: Mei Lin. Deposit: 2900 EUR.",
        "schema": _obj(
            {
                "unit": S,
                "address": S,
                "start": S,
                "months": INT,
                "rent": N,
                "currency": S,
                "tenant": S,
                "deposit": N,
            }
        ),  # fmt: skip
        "expect": {
            "unit": "4C",
            "address": "19 Harbour Road",
            "start": "2026-07-01",
            "months": 12,
            "rent": 1450,
            "currency": "EUR",
            "tenant": "Mei Lin",
            "deposit": 2900,
        },  # fmt: skip
    },
    {
        "name": "incident",
        "text": "Incident INC-2291: database replica db-3 ran out of disk at 02:14 UTC. Impact: reports were "
        "delayed for 40 minutes. Owner: platform team. Status: resolved.",
        "schema": _obj(
            {
                "id": S,
                "host": S,
                "time": S,
                "delay_minutes": INT,
                "owner": S,
                "status": {"enum": ["open", "mitigated", "resolved"]},
            }
        ),  # fmt: skip
        "expect": {
            "id": "INC-2291",
            "host": "db-3",
            "time": "02:14 UTC",
            "delay_minutes": 40,
            "status": "resolved",
        },  # fmt: skip
    },
]


def messages(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": "Extract the record.\n\n" + text}]


def all_cases() -> list[dict[str, Any]]:
    """CASES plus the slow tests' extraction cases (with their own system prompt)."""
    from tests.slow.extraction_cases import CASES as TEST_CASES
    from tests.slow.extraction_cases import messages as test_messages

    out = [{**c, "messages": messages(c["text"])} for c in CASES]
    out += [{"name": n, "text": t, "schema": s, "expect": e, "messages": test_messages(t)} for n, t, s, e in TEST_CASES]
    return out

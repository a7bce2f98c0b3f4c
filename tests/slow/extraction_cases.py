"""Extraction examples for the default model: a document, a schema with enums and closed
objects, and the values a correct extraction must contain."""

from __future__ import annotations

from typing import Any

INVOICE_TEXT = (
    "INVOICE INV-2024-0042\n"
    "Vendor: Acme Supplies Ltd\n"
    "Date: 2024-03-15\n"
    "2 x ergonomic chair at 450.00\n"
    "1 x standing desk at 350.00\n"
    "Total: 1250.00\n"
    "Currency: EUR\n"
    "Status: unpaid\n"
)
INVOICE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "invoice_number": {"type": "string"},
        "vendor": {"type": "string"},
        "date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
        "total": {"type": "number"},
        "currency": {"enum": ["EUR", "USD", "GBP"]},
        "status": {"enum": ["paid", "unpaid", "overdue"]},
    },
    "required": ["invoice_number", "vendor", "date", "total", "currency", "status"],
    "additionalProperties": False,
}
INVOICE_EXPECT = {
    "invoice_number": "INV-2024-0042",
    "vendor": "Acme Supplies Ltd",
    "date": "2024-03-15",
    "total": 1250.0,
    "currency": "EUR",
    "status": "unpaid",
}

DISCHARGE_TEXT = (
    "DISCHARGE SUMMARY\n"
    "Patient: Maria Lopez\n"
    "Admitted: 2024-02-01. Discharged: 2024-02-06.\n"
    "Diagnosis: community-acquired pneumonia\n"
    "Medications on discharge: amoxicillin, paracetamol\n"
    "Discharged to: home\n"
)
DISCHARGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "patient": {"type": "string"},
        "admitted": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
        "discharged": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
        "diagnosis": {"type": "string"},
        "medications": {"type": "array", "items": {"type": "string"}},
        "disposition": {"enum": ["home", "rehab", "nursing facility", "transferred"]},
    },
    "required": ["patient", "admitted", "discharged", "diagnosis", "medications", "disposition"],
    "additionalProperties": False,
}
DISCHARGE_EXPECT = {
    "patient": "Maria Lopez",
    "admitted": "2024-02-01",
    "discharged": "2024-02-06",
    "diagnosis": "community-acquired pneumonia",
    "medications": ["amoxicillin", "paracetamol"],
    "disposition": "home",
}

CASES = [
    ("invoice", INVOICE_TEXT, INVOICE_SCHEMA, INVOICE_EXPECT),
    ("discharge", DISCHARGE_TEXT, DISCHARGE_SCHEMA, DISCHARGE_EXPECT),
]


def messages(text: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "Extract the fields of the document as JSON. Copy values exactly."},
        {"role": "user", "content": text},
    ]

"""The benchmark's source texts, fixed so every server and every run sees the same: a discharge
note with the values an extraction takes from it, a retrieved passage, a 300-line Python file
with the one change asked of it, and an open question. All ASCII, so a GBNF literal of any of
them is plain to write."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

__all__ = ["NOTE_FIELDS", "NOTE_SCHEMA", "PASSAGE", "QUESTION", "EditedFile", "clinical_note", "edited_file"]

# ---------------------------------------------------------------------------------------------
# (a) A discharge note (~1,000 tokens) and the fields an extraction copies from it verbatim.

NOTE_FIELDS: dict[str, Any] = {
    "patient_name": "Margaret E. Holloway",
    "medical_record_number": "MRN-4471-0923",
    "date_of_birth": "1951-03-14",
    "admission_date": "2026-10-02",
    "discharge_date": "2026-10-09",
    "attending_physician": "Dr. Samuel Okafor",
    "primary_diagnosis": "Acute decompensated heart failure with reduced ejection fraction",
    "secondary_diagnoses": [
        "Community-acquired pneumonia, right lower lobe",
        "Type 2 diabetes mellitus with hyperglycemia",
        "Chronic kidney disease, stage 3a",
    ],
    "allergies": ["Penicillin (hives)", "Sulfa drugs (rash)"],
    "discharge_medications": [
        "Sacubitril-valsartan 49-51 mg by mouth twice daily",
        "Metoprolol succinate 50 mg by mouth once daily",
        "Furosemide 40 mg by mouth once daily",
        "Spironolactone 25 mg by mouth once daily",
        "Empagliflozin 10 mg by mouth once daily",
        "Atorvastatin 40 mg by mouth at bedtime",
    ],
    "follow_up": "Heart failure clinic with Dr. Priya Raman on 2026-10-16 at 10:30",
}

NOTE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        key: ({"type": "array", "items": {"type": "string"}} if isinstance(v, list) else {"type": "string"})
        for key, v in NOTE_FIELDS.items()
    },
    "required": list(NOTE_FIELDS),
    "additionalProperties": False,
}

_NARRATIVE = [
    "She was seen by the cardiology team on the morning of admission and started on intravenous diuresis.",
    "Daily weights were recorded before breakfast and fluid intake was limited to one and a half liters.",
    "Nursing staff reported that she slept poorly for the first two nights because of orthopnea.",
    "By the third day her breathing had improved and she was able to walk the length of the ward.",
    "The physical therapy team assessed her gait and recommended a walker for longer distances at home.",
    "Her daughter visited every afternoon and took part in the teaching sessions on diet and medication.",
    "A low sodium diet was explained, with written material on reading food labels and planning meals.",
    "Blood glucose was checked before meals and at bedtime, and the insulin scale was adjusted twice.",
    "The chest radiograph on the fifth day showed clearing of the right lower lobe consolidation.",
    "She completed a five day course of intravenous ceftriaxone followed by oral azithromycin.",
    "Renal function was followed daily because of the diuresis and remained close to her baseline.",
    "Potassium was replaced on two occasions when it fell below the lower limit of the normal range.",
    "The echocardiogram was reviewed with the patient and the reasons for each new medicine were discussed.",
    "She was able to state her target weight and the symptoms that should prompt a call to the clinic.",
    "Social work confirmed that her pharmacy can deliver medications and that she has transport to clinic.",
    "On the day of discharge she was comfortable at rest, walking independently, and eager to go home.",
]

_LABS = [
    ("Sodium", "134 mmol/L", "138 mmol/L"),
    ("Potassium", "3.4 mmol/L", "4.2 mmol/L"),
    ("Creatinine", "1.48 mg/dL", "1.39 mg/dL"),
    ("BNP", "1840 pg/mL", "612 pg/mL"),
    ("Hemoglobin A1c", "8.1 %", "8.1 %"),
    ("White cell count", "13.2 x10^9/L", "8.4 x10^9/L"),
    ("Hemoglobin", "11.9 g/dL", "12.3 g/dL"),
    ("Troponin I", "0.04 ng/mL", "0.03 ng/mL"),
]


def clinical_note() -> str:
    """The discharge note: every value of NOTE_FIELDS appears in it verbatim."""
    f = NOTE_FIELDS
    lines = [
        "DISCHARGE SUMMARY",
        "",
        f"Patient: {f['patient_name']}    Record number: {f['medical_record_number']}",
        f"Date of birth: {f['date_of_birth']}    Sex: female",
        f"Admitted: {f['admission_date']}    Discharged: {f['discharge_date']}",
        f"Attending physician: {f['attending_physician']}    Service: Internal Medicine, Ward 6B",
        "",
        "PRINCIPAL DIAGNOSIS",
        f"{f['primary_diagnosis']}.",
        "",
        "SECONDARY DIAGNOSES",
        *(f"- {d}" for d in f["secondary_diagnoses"]),
        "",
        "ALLERGIES",
        *(f"- {a}" for a in f["allergies"]),
        "",
        "HISTORY OF PRESENT ILLNESS",
        "Mrs. Holloway is a 75-year-old woman with a history of ischemic cardiomyopathy, type 2 diabetes and "
        "chronic kidney disease who presented to the emergency department with five days of worsening "
        "shortness of breath, a productive cough with yellow sputum, and swelling of both ankles. She reported "
        "that she had run out of her water tablet about two weeks earlier and had not refilled it. She had "
        "gained four kilograms over ten days. In the emergency department she was breathing 26 times a minute "
        "with an oxygen saturation of 88 percent on room air, a temperature of 38.1 degrees Celsius, and "
        "crackles at both lung bases, coarser on the right.",
        "",
        "HOSPITAL COURSE",
        *_NARRATIVE,
        "",
        "LABORATORY RESULTS (admission, discharge)",
        *(f"- {name}: {a}, {b}" for name, a, b in _LABS),
        "",
        "IMAGING",
        "Chest radiograph on admission: bilateral interstitial edema, small bilateral pleural effusions, and "
        "consolidation in the right lower lobe. Transthoracic echocardiogram: left ventricular ejection "
        "fraction 30 percent with global hypokinesis, moderate mitral regurgitation, no pericardial effusion.",
        "",
        "DISCHARGE MEDICATIONS",
        *(f"- {m}" for m in f["discharge_medications"]),
        "Metformin was stopped because of her kidney function. Her previous lisinopril was stopped and "
        "replaced by sacubitril-valsartan after a washout of thirty-six hours.",
        "",
        "DISCHARGE CONDITION",
        "Stable. Weight at discharge 71.4 kg (target weight). Oxygen saturation 95 percent on room air.",
        "",
        "FOLLOW-UP",
        f"{f['follow_up']}. Basic metabolic panel in one week at the community laboratory. Primary care "
        "review within two weeks. She is to call the clinic if her weight rises by more than two kilograms "
        "in three days, or if her breathing worsens.",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# (b) A retrieved passage to quote.

PASSAGE = (
    "The Alder Street Bridge was opened in 1898 to carry horse-drawn traffic across the Mill River, "
    "replacing a timber crossing that had washed away in the spring flood of 1896. It was designed by "
    "the county engineer, Thomas Whitcombe, as three wrought-iron truss spans resting on two granite "
    "piers, and it was built in fourteen months by a crew of about sixty men. The granite came from a "
    "quarry eleven miles upstream and was floated down on barges during the high water of the autumn. "
    "When the electric streetcar line reached the east bank in 1911, the deck was rebuilt with steel "
    "stringers and a concrete slab so that it could carry the weight of the cars, and the original "
    "wooden footways were replaced by cantilevered sidewalks on both sides. The bridge survived the "
    "great flood of 1936, when the water rose to within a meter of the lower chords, although the "
    "western approach was undermined and had to be rebuilt the following year. In 1962 the streetcar "
    "tracks were removed and the bridge was closed to trucks after an inspection found corrosion in "
    "the floor beams. A proposal to demolish it and build a four-lane crossing was defeated in a local "
    "vote in 1974, after a campaign led by the historical society and the residents of the old mill "
    "district. The bridge was restored between 1988 and 1991: every truss member was inspected, about "
    "a fifth of them were replaced with new steel of the same profile, and the piers were repointed "
    "with a lime mortar matched to the original. Today it carries pedestrians and bicycles only, and "
    "a small plaque at the eastern end records the names of the workers who were injured during its "
    "construction. It was added to the state register of historic places in 1993."
)


# ---------------------------------------------------------------------------------------------
# (c) A 300-line file and one change to it.


@dataclass(frozen=True)
class EditedFile:
    """`original` (300 lines), the `instruction` asking for one line's change, and `edited`."""

    original: str
    instruction: str
    edited: str


_NOUNS = (
    *("order", "invoice", "account", "ledger", "payment", "refund", "customer", "supplier"),
    *("shipment", "parcel", "route", "warehouse", "report", "budget", "forecast", "contract"),
)
_VERBS = ("load", "save", "check", "merge", "split", "total", "count", "clean", "sort", "group")


def edited_file(n_lines: int = 300) -> EditedFile:
    """A deterministic Python module of exactly `n_lines` lines whose sixth line sets
    DEFAULT_TIMEOUT; the change asked for sets it to 45 instead of 30."""
    head = [
        '"""Helpers for the back-office batch jobs."""',
        "",
        "from __future__ import annotations",
        "",
        "DEFAULT_RETRIES = 3",
        "DEFAULT_TIMEOUT = 30",
        "",
    ]
    rng = random.Random(7)
    body: list[str] = []
    while len(head) + len(body) < n_lines:
        noun, verb = rng.choice(_NOUNS), rng.choice(_VERBS)
        k = rng.randint(2, 9)
        body += [
            "",
            f"def {verb}_{noun}_{len(body)}(items, limit={k}):",
            f'    """{verb.capitalize()} up to {k} {noun} records."""',
            "    out = []",
            "    for item in items[:limit]:",
            f"        out.append(item.get({noun!r}, {k}))",
            "    return out",
        ]
    lines = (head + body)[:n_lines]
    original = "\n".join(lines) + "\n"
    edited = original.replace("DEFAULT_TIMEOUT = 30\n", "DEFAULT_TIMEOUT = 45\n", 1)
    return EditedFile(original, "Change DEFAULT_TIMEOUT from 30 to 45.", edited)


# ---------------------------------------------------------------------------------------------
# (d) An open question: nothing in the prompt to copy.

QUESTION = (
    "Write a short story, about three hundred words, about a lighthouse keeper on a remote island "
    "who finds an old map hidden in the wall of the lamp room. Describe what she decides to do."
)

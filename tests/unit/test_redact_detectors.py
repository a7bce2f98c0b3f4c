"""Each redaction detector: real-format identifiers are found whole, near-misses are not."""

from __future__ import annotations

import pytest

from llamay.redact import DETECTORS, redact

# Text around each identifier, so that boundaries are exercised rather than whole strings.
PREFIX, SUFFIX = "Please note: ", " is on file."


def spans(kind: str, value: str) -> list[str]:
    text = PREFIX + value + SUFFIX
    return [text[f.start : f.end] for f in redact(text, [kind]).findings]


def assert_found(kind: str, values: list[str]) -> None:
    for value in values:
        assert spans(kind, value) == [value], value


def assert_missed(kind: str, values: list[str]) -> None:
    for value in values:
        assert spans(kind, value) == [], value
        # No other detector may claim a near-miss either.
        text = PREFIX + value + SUFFIX
        assert redact(text).findings == [], value


def test_email() -> None:
    assert_found(
        "EMAIL",
        [
            "jane.doe@example.org",
            "j.o'brien+news@mail.example.co.uk",
            "first_last-99@sub-domain.example.io",
            "josé.niño@correo.example.es",
            "user@xn--bcher-kva.example",
        ],
    )
    assert_missed(
        "EMAIL", ["jane@localhost", "jane@example.c", "jane@example.c0m", "@example.org", "a..b@x.org"]
    )
    assert spans("EMAIL", "'jane@example.org'") == ["jane@example.org"]
    assert spans("EMAIL", "mail jane@example.org.") == ["jane@example.org"]


PUBLISHED_TEST_CARDS = [
    "4111111111111111",  # Visa
    "4012888888881881",  # Visa
    "4222222222222",  # Visa, 13 digits
    "5555555555554444",  # Mastercard
    "5105105105105100",  # Mastercard
    "2223003122003222",  # Mastercard 2-series
    "378282246310005",  # Amex
    "371449635398431",  # Amex
    "6011111111111117",  # Discover
    "6011000990139424",  # Discover
    "3530111333300000",  # JCB
    "3566002020360505",  # JCB
    "30569309025904",  # Diners
    "38520000023237",  # Diners
    "6200000000000005",  # UnionPay
    "6759649826438453",  # Maestro
    "5018000000000009",  # Maestro
]


def test_card_numbers() -> None:
    assert_found("CARD_NUMBER", PUBLISHED_TEST_CARDS)
    assert_found(
        "CARD_NUMBER",
        [
            "4111 1111 1111 1111",
            "5555-5555-5555-4444",
            "3782 822463 10005",
            "3056 930902 5904",
            "4222 2222 2222 2",
        ],
    )


def test_card_near_misses() -> None:
    assert_missed(
        "CARD_NUMBER",
        [
            "4111111111111112",  # wrong check digit
            "4111 1111 1111 1112",
            "1234567812345670",  # Luhn-valid, no issuer starts with 1
            "37828224631000",  # Amex prefix, Luhn-valid, 14 digits
            "4111 1111-1111 1111",  # mixed separators
            "41 11 11 11 11 11 11 11",  # not a printed layout
            "x4111111111111111",
        ],
    )


def test_card_inside_a_longer_run() -> None:
    assert spans("CARD_NUMBER", "in 2019 4111 1111 1111 1111 123") == ["4111 1111 1111 1111"]
    assert spans("CARD_NUMBER", "4111111111111111 5555555555554444") == [
        "4111111111111111",
        "5555555555554444",
    ]


REGISTRY_EXAMPLE_IBANS = [
    "AL47212110090000000235698741", "AD1200012030200359100100", "AT611904300234573201",
    "BE68539007547034", "BA391290079401028494", "BG80BNBG96611020345678",
    "HR1210010051863000160", "CY17002001280000001200527600", "CZ6508000000192000145399",
    "DK5000400440116243", "EE382200221020145685", "FI2112345600000785",
    "FR1420041010050500013M02606", "DE89370400440532013000", "GI75NWBK000000007099453",
    "GR1601101250000000012300695", "HU42117730161111101800000000", "IS140159260076545510730339",
    "IE29AIBK93115212345678", "IT60X0542811101000000123456", "LV80BANK0000435195001",
    "LI21088100002324013AA", "LT121000011101001000", "LU280019400644750000",
    "MT84MALT011000012345MTLCAST001S", "MC5811222000010123456789030", "NL91ABNA0417164300",
    "NO9386011117947", "PL61109010140000071219812874", "PT50000201231234567890154",
    "RO49AAAA1B31007593840000", "SM86U0322509800000000270100", "SK3112000000198742637541",
    "SI56263300012039086", "ES9121000418450200051332", "SE4550000000058398257466",
    "CH9300762011623852957", "GB29NWBK60161331926819", "SA0380000000608010167519",
    "TR330006100519786457841326", "AE070331234567890123456", "BR1800360305000010009795493C1",
    "UA213223130000026007233566001", "IL620108000000099999999", "KZ86125KZT5004100100",
    "QA58DOHB00001234567890ABCDEFG", "JO94CBJO0010000000000131000302",
    "RU0204452560040702810412345678901", "LC55HEMM000100010012001200023015",
    "MU17BOMM0101101030300200000MUR",
]  # fmt: skip


def grouped(compact: str) -> str:
    return " ".join(compact[i : i + 4] for i in range(0, len(compact), 4))


def test_iban() -> None:
    assert_found("IBAN", REGISTRY_EXAMPLE_IBANS)
    assert_found("IBAN", [grouped(iban) for iban in REGISTRY_EXAMPLE_IBANS])
    # A word in capitals after a printed IBAN is not taken into it.
    assert spans("IBAN", "GB82 WEST 1234 5698 7654 32 ABCD") == ["GB82 WEST 1234 5698 7654 32"]


def test_iban_near_misses() -> None:
    assert_missed(
        "IBAN",
        [
            "DE89370400440532013001",  # bad checksum
            "GB82 WEST 1234 5698 7654 33",
            "DE8937040044053201300",  # one short for Germany
            "BE6853900754703400",  # Belgian length is 16
            "XX89370400440532013000",  # no such country
            "GB82 WES T123 4569 8765 432",  # not in groups of four
            "DE89370400440532013000AB",
        ],
    )


@pytest.mark.parametrize(
    "number",
    [
        "+1 650-253-0000",
        "(650) 253-0000",
        "+44 20 7946 0958",
        "020 7946 0958",
        "+44 7911 123456",
        "+49 30 901820",
        "030 901820",
        "+49 1512 3456789",
        "+91 98765 43210",
        "098765 43210",
        "+91 22 2778 2778",
        "+33 1 42 68 53 00",
    ],
)
def test_phone(number: str) -> None:
    assert spans("PHONE", number) == [number]


def test_phone_near_misses() -> None:
    assert_missed("PHONE", ["+1 123 456 7890", "+44 20 1234", "+49 123", "555-0100", "+1 650 253 00000"])


def test_phone_regions_are_configurable() -> None:
    from llamay.redact import phone_detector

    us_only = {**DETECTORS, "PHONE": phone_detector(["US"])}
    text = "call 020 7946 0958 or +44 20 7946 0958"
    found = [text[f.start : f.end] for f in redact(text, ["PHONE"], detectors=us_only).findings]
    assert found == ["+44 20 7946 0958"]  # national format needs GB among the regions


def test_us_ssn() -> None:
    assert_found("US_SSN", ["536-22-1234", "536 22 1234", "001-01-0001", "899-99-9999", "665-12-3456"])
    assert_missed(
        "US_SSN",
        [
            "000-12-3456",
            "666-12-3456",
            "900-12-3456",
            "987-65-4321",
            "536-00-1234",
            "536-22-0000",
            "078-05-1120",
            "219-09-9999",
            "536-22 1234",
            "536221234",
        ],
    )


def test_uk_nino() -> None:
    assert_found("UK_NINO", ["AB123456C", "AB 12 34 56 C", "JG103759A", "CE 12 34 56 D", "PE445566B"])
    assert_missed(
        "UK_NINO",
        [
            "BG123456A", "GB123456A", "NK123456A", "KN123456A", "TN123456A", "NT123456A", "ZZ123456A",
            "DA123456A", "AF123456A", "QQ123456C", "AO123456B", "AB123456E", "AB12345C", "ab123456c",
        ],
    )  # fmt: skip


def test_ip_address() -> None:
    assert_found(
        "IP_ADDRESS",
        ["192.168.1.1", "8.8.8.8", "255.255.255.255", "2001:db8::1", "fe80::1%eth0", "::ffff:192.0.2.1"],
    )
    assert_found("IP_ADDRESS", ["2001:0db8:85a3:0000:0000:8a2e:0370:7334", "::1"])
    assert_missed("IP_ADDRESS", ["999.1.1.1", "192.168.1", "256.1.1.1", "1.2.3.4.5", "12:30:45", "::"])
    assert_missed("IP_ADDRESS", ["00:1A:2B:3C:4D:5E", "2001:db8:::1", "v1.2.3.4"])


def test_date_of_birth() -> None:
    cases = {
        "DOB: 12/03/1985": "12/03/1985",
        "d.o.b. 1985-03-12": "1985-03-12",
        "Date of birth: 12 March 1985": "12 March 1985",
        "born on March 12, 1985": "March 12, 1985",
        "born 12th of Mar 1985": "12th of Mar 1985",
        "birthdate 12.03.85": "12.03.85",
        "DOB is 03/25/1990": "03/25/1990",
        "date of birth 12-Mar-1985": "12-Mar-1985",
    }
    for text, date in cases.items():
        assert spans("DATE_OF_BIRTH", text) == [date], text


def test_date_of_birth_near_misses() -> None:
    assert_missed(
        "DATE_OF_BIRTH",
        [
            "12/03/1985",  # no label
            "meeting on 12 March 1985",
            "DOB: 31/31/1985",  # no such date either way round
            "DOB: 30 February 1985",
            "DOB: 12/03/2999",  # not born yet
            "born in 1985",
        ],
    )


def test_card_head_of_a_longer_printed_number_is_not_a_card() -> None:
    # "6759 5443 2919" is a Luhn-valid 12-digit Maestro number; the 16 digits are not valid.
    assert spans("CARD_NUMBER", "6759 5443 2919 1302") == []
    assert spans("CARD_NUMBER", "4111 1111 1111 1111 2025") == ["4111 1111 1111 1111"]
    assert spans("CARD_NUMBER", "4111111111111111 2025") == ["4111111111111111"]

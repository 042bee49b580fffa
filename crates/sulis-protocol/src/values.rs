//! Value parsers shared by channel URIs, driver and client options and the
//! tools: sizes (`64k`), booleans (`true`/`false`) and durations.
//!
//! Two duration grammars, on purpose. Channel URIs keep Aeron's: a bare
//! number is nanoseconds (`linger=5000000`), so configurations copied from
//! Aeron mean the same. Options (keyword arguments, `SULIS_*` variables,
//! command-line flags) refuse a bare number other than 0: `5` could mean
//! seconds or nanoseconds, and guessing wrong by 10^9 is the classic trap.

/// Parses a size in bytes: digits with an optional `k`, `m` or `g` suffix
/// (any case; powers of 1024), e.g. `4096`, `64k`, `16M`, `1g`.
///
/// # Errors
/// A reason when `s` is not of that form or the size does not fit in a `u64`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let (digits, multiplier) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 1u64 << 10),
        Some(b'm' | b'M') => (&s[..s.len() - 1], 1u64 << 20),
        Some(b'g' | b'G') => (&s[..s.len() - 1], 1u64 << 30),
        _ => (s, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "'{s}' is not a size; use a number of bytes with an optional k, m or g suffix (e.g. 64k)"
        ));
    }
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(multiplier))
        .ok_or_else(|| format!("'{s}' is too large a size"))
}

/// Parses a duration in a channel URI into nanoseconds: digits with an
/// optional `ns`, `us`, `ms` or `s` suffix (any case); no suffix means
/// nanoseconds, as in Aeron's URIs (`linger=5000000`), so existing channel
/// strings read the same. Options use [`parse_duration_option`] instead.
///
/// # Errors
/// A reason when `s` is not of that form or the duration does not fit in a `u64`.
pub fn parse_duration_ns(s: &str) -> Result<u64, String> {
    let lower = s.to_ascii_lowercase();
    let (digits, multiplier) = if let Some(d) = lower.strip_suffix("ns") {
        (d, 1u64)
    } else if let Some(d) = lower.strip_suffix("us") {
        (d, 1_000)
    } else if let Some(d) = lower.strip_suffix("ms") {
        (d, 1_000_000)
    } else if let Some(d) = lower.strip_suffix('s') {
        (d, 1_000_000_000)
    } else {
        (lower.as_str(), 1)
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "'{s}' is not a duration; use a number with an optional ns, us, ms or s suffix (e.g. 5s)"
        ));
    }
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(multiplier))
        .ok_or_else(|| format!("'{s}' is too long a duration"))
}

/// Parses a boolean: exactly `true` or `false`.
///
/// # Errors
/// A reason for anything else (`TRUE`, `1`, `yes`, ...).
pub fn parse_bool(s: &str) -> Result<bool, String> {
    match s {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(format!("'{s}' is not a boolean; use true or false")),
    }
}

const DURATION_UNITS: [(&str, u64); 7] = [
    ("ns", 1),
    ("us", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
    ("d", 86_400_000_000_000),
];

/// Parses an option's duration into nanoseconds: a number with a unit,
/// `ns`, `us`, `ms`, `s`, `m`, `h` or `d` (any case), possibly with a decimal fraction
/// (`1.5s`, `0.25ms`), or `0`. A bare non-zero number is refused as
/// ambiguous, naming the two readings.
///
/// # Errors
/// A reason when `s` is not of that form, is finer than a nanosecond, or
/// does not fit in a `u64` of nanoseconds.
pub fn parse_duration_option(s: &str) -> Result<u64, String> {
    let lower = s.to_ascii_lowercase();
    if lower == "0" {
        return Ok(0);
    }
    let unit = DURATION_UNITS
        .iter()
        .filter(|(suffix, _)| lower.ends_with(suffix))
        .max_by_key(|(suffix, _)| suffix.len());
    let not_a_duration = || {
        format!("'{s}' is not a duration; use a number with a unit: ns, us, ms, s, m, h or d (e.g. 5s, 500ms, 1.5s, 7d)")
    };
    let Some((suffix, multiplier)) = unit else {
        if !lower.is_empty() && lower.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return Err(format!(
                "'{s}' is ambiguous: a duration needs a unit, e.g. '{s}s' for seconds or '{s}ns' for nanoseconds \
                 (from Python, a float is seconds)"
            ));
        }
        return Err(not_a_duration());
    };
    let number = &lower[..lower.len() - suffix.len()];
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits_ok = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits_ok(whole) || !digits_ok(fraction) || number.ends_with('.') {
        return Err(not_a_duration());
    }
    let too_long = || format!("'{s}' is too long a duration");
    let mut ns = whole
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(*multiplier))
        .ok_or_else(too_long)?;
    // The fraction, digit by digit: exact, and refused below a nanosecond.
    let mut scale = *multiplier;
    for d in fraction.bytes() {
        if scale % 10 != 0 {
            return Err(format!("'{s}' is finer than a nanosecond"));
        }
        scale /= 10;
        ns = ns
            .checked_add(u64::from(d - b'0') * scale)
            .ok_or_else(too_long)?;
    }
    Ok(ns)
}

/// Shows nanoseconds in the largest unit that holds them exactly
/// (`10s`, `250ms`, `1500us`, `7ns`, `0`); [`parse_duration_option`] reads
/// the text back to the same value.
pub fn format_duration_ns(ns: u64) -> String {
    if ns == 0 {
        return "0".to_string();
    }
    // Shown in ns to s whatever the size (`60s`, not `1m`): what existing settings read as.
    let (suffix, multiplier) = DURATION_UNITS[..4]
        .iter()
        .rev()
        .find(|(_, m)| ns.is_multiple_of(*m))
        .copied()
        .unwrap_or(("ns", 1));
    format!("{}{suffix}", ns / multiplier)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn should_parse_sizes() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64k"), Ok(64 * 1024));
        assert_eq!(parse_size("64K"), Ok(64 * 1024));
        assert_eq!(parse_size("16m"), Ok(16 << 20));
        assert_eq!(parse_size("16M"), Ok(16 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("3G"), Ok(3 << 30));
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
        for bad in ["", "k", "-1", "+1", "1.5k", "1kb", "1 k", "1t", " 1"] {
            assert!(parse_size(bad).unwrap_err().contains("not a size"), "{bad}");
        }
        assert!(parse_size("18446744073709551616")
            .unwrap_err()
            .contains("too large"));
        assert!(parse_size("17179869184g")
            .unwrap_err()
            .contains("too large"));
        assert_eq!(parse_size("17179869183g"), Ok(17_179_869_183 << 30));
    }

    #[test]
    fn should_parse_durations() {
        assert_eq!(parse_duration_ns("0"), Ok(0));
        assert_eq!(parse_duration_ns("1ns"), Ok(1));
        assert_eq!(parse_duration_ns("250"), Ok(250));
        assert_eq!(parse_duration_ns("100us"), Ok(100_000));
        assert_eq!(parse_duration_ns("10ms"), Ok(10_000_000));
        assert_eq!(parse_duration_ns("10MS"), Ok(10_000_000));
        assert_eq!(parse_duration_ns("5s"), Ok(5_000_000_000));
        assert_eq!(parse_duration_ns("5S"), Ok(5_000_000_000));
        for bad in ["", "s", "ms", "5m", "5 s", "-5s", "1.5s", "5sec"] {
            assert!(
                parse_duration_ns(bad)
                    .unwrap_err()
                    .contains("not a duration"),
                "{bad}"
            );
        }
        assert!(parse_duration_ns("18446744074s")
            .unwrap_err()
            .contains("too long"));
        assert_eq!(
            parse_duration_ns("18446744073s"),
            Ok(18_446_744_073_000_000_000)
        );
        assert!(parse_duration_ns("99999999999999999999")
            .unwrap_err()
            .contains("too long"));
    }

    #[test]
    fn should_parse_booleans() {
        assert_eq!(parse_bool("true"), Ok(true));
        assert_eq!(parse_bool("false"), Ok(false));
        for bad in ["True", "FALSE", "1", "0", "", "yes"] {
            assert!(parse_bool(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn should_parse_option_durations_with_units_only() {
        assert_eq!(parse_duration_option("0"), Ok(0));
        assert_eq!(parse_duration_option("5s"), Ok(5_000_000_000));
        assert_eq!(parse_duration_option("500ms"), Ok(500_000_000));
        assert_eq!(parse_duration_option("250US"), Ok(250_000));
        assert_eq!(parse_duration_option("7ns"), Ok(7));
        assert_eq!(parse_duration_option("1.5s"), Ok(1_500_000_000));
        assert_eq!(parse_duration_option("0.25ms"), Ok(250_000));
        assert_eq!(parse_duration_option("2.000000001s"), Ok(2_000_000_001));
        for ambiguous in ["3", "10000000000", "1.5"] {
            let e = parse_duration_option(ambiguous).unwrap_err();
            assert!(
                e.contains("ambiguous") && e.contains(&format!("'{ambiguous}s'")),
                "{e}"
            );
        }
        for bad in [
            "", "s", "5mn", "5 s", "-5s", "5sec", ".5s", "5.s", "1..5s", "five",
        ] {
            let e = parse_duration_option(bad).unwrap_err();
            assert!(e.contains("not a duration"), "{bad}: {e}");
        }
        // Minutes, hours and days, for retention's ages; shown back in seconds.
        for (text, s) in [("5m", 300), ("1.5h", 5_400), ("7d", 604_800)] {
            assert_eq!(parse_duration_option(text), Ok(s * 1_000_000_000), "{text}");
            assert_eq!(format_duration_ns(s * 1_000_000_000), format!("{s}s"));
        }
        assert!(parse_duration_option("1.5ns")
            .unwrap_err()
            .contains("finer than a nanosecond"));
        assert!(parse_duration_option("0.0000000001s")
            .unwrap_err()
            .contains("finer"));
        assert!(parse_duration_option("18446744074s")
            .unwrap_err()
            .contains("too long"));
    }

    #[test]
    fn should_format_durations_that_read_back_the_same() {
        for (ns, text) in [
            (0, "0"),
            (7, "7ns"),
            (1_500, "1500ns"),
            (250_000, "250us"),
            (1_500_000_000, "1500ms"),
            (10_000_000_000, "10s"),
        ] {
            assert_eq!(format_duration_ns(ns), text);
            assert_eq!(parse_duration_option(text), Ok(ns));
        }
    }
}

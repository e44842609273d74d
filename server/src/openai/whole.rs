//! Whole numbers as JSON Schema counts them: `16` and `16.0` alike (a client that writes
//! every number as a float, as some languages' JSON encoders do, is not refused for it).
//! A fraction, or a number out of the field's range, is still a type error naming the field.

use serde::de::{Deserializer, Error};
use serde::Deserialize;
use serde_json::{Number, Value};

/// `value` as a whole number of `T`, where it is one and fits.
pub fn whole<T: TryFrom<i128>>(value: &Value) -> Option<T> {
    let n = value.as_number()?;
    number(n).and_then(|n| T::try_from(n).ok())
}

fn number(n: &Number) -> Option<i128> {
    if let Some(u) = n.as_u64() {
        return Some(i128::from(u));
    }
    if let Some(i) = n.as_i64() {
        return Some(i128::from(i));
    }
    let f = n.as_f64()?;
    // Past 2^64 an f64 has no fraction to speak of; those are out of every field's range.
    (f.fract() == 0.0 && f.abs() < 1.9e19).then_some(f as i128)
}

/// For `#[serde(deserialize_with = "whole::optional")]`: `null` or absent is `None`.
pub fn optional<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<i128>,
{
    match Option::<Number>::deserialize(d)? {
        None => Ok(None),
        Some(n) => number(&n)
            .and_then(|n| T::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| D::Error::custom(format!("{n} is not a whole number in range"))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn integral_floats_are_whole_numbers_and_fractions_are_not() {
        assert_eq!(whole::<u32>(&json!(16)), Some(16));
        assert_eq!(whole::<u32>(&json!(16.0)), Some(16));
        assert_eq!(whole::<u32>(&json!(16.5)), None);
        assert_eq!(whole::<u32>(&json!(-1)), None);
        assert_eq!(whole::<u32>(&json!(4294967296u64)), None);
        assert_eq!(whole::<i64>(&json!(-1.0)), Some(-1));
        assert_eq!(whole::<u64>(&json!(1e30)), None);
    }
}

//! Typed access to OTLP attributes, with errors that name the attribute and what was wrong.
//!
//! Engines are loose with types (an int sent as a double, an array of arrays sent as a JSON
//! string), so getters accept the lossless variants and reject the rest.

use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value::Value};

use tokenscope_core::model::validate::FieldError;

pub type Attr<T> = Result<Option<T>, FieldError>;

#[derive(Clone, Copy)]
pub struct Attrs<'a> {
    kvs: &'a [KeyValue],
}

fn type_error(key: &str, want: &str, got: &Value) -> FieldError {
    let got = match got {
        Value::StringValue(s) => format!("the string {s:?}"),
        Value::BoolValue(b) => format!("the boolean {b}"),
        Value::IntValue(i) => format!("the integer {i}"),
        Value::DoubleValue(d) => format!("the double {d}"),
        Value::ArrayValue(_) => "an array".into(),
        Value::KvlistValue(_) => "a key-value list".into(),
        Value::BytesValue(_) => "bytes".into(),
        Value::StringValueStrindex(_) => "a string-table reference".into(),
    };
    FieldError::new(
        format!("attributes[{key:?}]"),
        format!("expected {want}, got {got}"),
    )
}

fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::DoubleValue(d) => Some(*d),
        Value::IntValue(i) => Some(*i as f64),
        _ => None,
    }
}

fn as_i64(v: &Value) -> Option<i64> {
    match v {
        Value::IntValue(i) => Some(*i),
        // A double that holds a whole number is an integer sent by a loosely typed exporter.
        Value::DoubleValue(d) if d.fract() == 0.0 && d.abs() < 9.0e15 => Some(*d as i64),
        _ => None,
    }
}

fn values(v: &AnyValue) -> Option<&Value> {
    v.value.as_ref()
}

impl<'a> Attrs<'a> {
    pub fn new(kvs: &'a [KeyValue]) -> Self {
        Self { kvs }
    }

    pub fn raw(&self, key: &str) -> Option<&'a Value> {
        self.kvs
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref())
            .and_then(values)
    }

    pub fn has(&self, key: &str) -> bool {
        self.raw(key).is_some()
    }

    pub fn str(&self, key: &str) -> Attr<&'a str> {
        match self.raw(key) {
            None => Ok(None),
            Some(Value::StringValue(s)) => Ok(Some(s)),
            Some(other) => Err(type_error(key, "a string", other)),
        }
    }

    /// A string, or an integer/boolean rendered as one (ids are sometimes sent as numbers).
    pub fn string_like(&self, key: &str) -> Attr<String> {
        match self.raw(key) {
            None => Ok(None),
            Some(Value::StringValue(s)) => Ok(Some(s.clone())),
            Some(Value::IntValue(i)) => Ok(Some(i.to_string())),
            Some(other) => Err(type_error(key, "a string", other)),
        }
    }

    pub fn f64(&self, key: &str) -> Attr<f64> {
        match self.raw(key) {
            None => Ok(None),
            Some(v) => as_f64(v)
                .map(Some)
                .ok_or_else(|| type_error(key, "a number", v)),
        }
    }

    pub fn i64(&self, key: &str) -> Attr<i64> {
        match self.raw(key) {
            None => Ok(None),
            Some(v) => as_i64(v)
                .map(Some)
                .ok_or_else(|| type_error(key, "an integer", v)),
        }
    }

    pub fn u32(&self, key: &str) -> Attr<u32> {
        match self.i64(key)? {
            None => Ok(None),
            Some(v) => u32::try_from(v).map(Some).map_err(|_| {
                FieldError::new(
                    format!("attributes[{key:?}]"),
                    format!("{v} is not a count"),
                )
            }),
        }
    }

    /// Seconds (a double, as engines report latencies) converted to nanoseconds; must be ≥ 0.
    pub fn seconds_ns(&self, key: &str) -> Attr<i64> {
        match self.f64(key)? {
            None => Ok(None),
            Some(s) if s.is_finite() && (0.0..1.0e7).contains(&s) => {
                Ok(Some((s * 1e9).round() as i64))
            }
            Some(s) => Err(FieldError::new(
                format!("attributes[{key:?}]"),
                format!("{s} is not a plausible duration in seconds"),
            )),
        }
    }

    /// An array attribute as a list of values (borrowed when it arrived as an OTLP array; an
    /// array may also arrive as a JSON string).
    fn array(&self, key: &str) -> Result<Option<Vec<std::borrow::Cow<'_, Value>>>, FieldError> {
        use std::borrow::Cow;
        match self.raw(key) {
            None => Ok(None),
            Some(Value::ArrayValue(a)) => Ok(Some(
                a.values
                    .iter()
                    .filter_map(|v| v.value.as_ref().map(Cow::Borrowed))
                    .collect(),
            )),
            Some(Value::StringValue(s)) => {
                let json: serde_json::Value = serde_json::from_str(s).map_err(|e| {
                    FieldError::new(
                        format!("attributes[{key:?}]"),
                        format!("is a string but not a JSON array: {e}"),
                    )
                })?;
                match json {
                    serde_json::Value::Array(items) => Ok(Some(
                        items.iter().map(|j| Cow::Owned(json_to_value(j))).collect(),
                    )),
                    _ => Err(FieldError::new(
                        format!("attributes[{key:?}]"),
                        "is a JSON string but not an array",
                    )),
                }
            }
            Some(other) => Err(type_error(key, "an array", other)),
        }
    }

    pub fn f64_array(&self, key: &str) -> Attr<Vec<f64>> {
        self.typed_array(key, "numbers", as_f64)
    }

    pub fn i64_array(&self, key: &str) -> Attr<Vec<i64>> {
        self.typed_array(key, "integers", as_i64)
    }

    pub fn str_array(&self, key: &str) -> Attr<Vec<String>> {
        self.typed_array(key, "strings", |v| match v {
            Value::StringValue(s) => Some(s.clone()),
            _ => None,
        })
    }

    fn typed_array<T>(
        &self,
        key: &str,
        what: &str,
        conv: impl Fn(&Value) -> Option<T>,
    ) -> Attr<Vec<T>> {
        let Some(items) = self.array(key)? else {
            return Ok(None);
        };
        items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                conv(v).ok_or_else(|| {
                    let e = type_error(key, &format!("an array of {what}"), v);
                    FieldError::new(format!("{}[{i}]", e.field), e.message)
                })
            })
            .collect::<Result<Vec<T>, _>>()
            .map(Some)
    }

    /// An array of arrays (per position, per candidate). Engines often send these as a JSON
    /// string: that is parsed straight into `T` (no intermediate values; the ingest profile
    /// showed the generic route as its largest cost).
    pub fn nested<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
        what: &str,
        conv: impl Fn(&Value) -> Option<T>,
    ) -> Attr<Vec<Vec<T>>> {
        if let Some(Value::StringValue(s)) = self.raw(key) {
            return serde_json::from_str::<Vec<Vec<T>>>(s)
                .map(Some)
                .map_err(|e| {
                    FieldError::new(
                        format!("attributes[{key:?}]"),
                        format!("is a string but not a JSON array of arrays of {what}: {e}"),
                    )
                });
        }
        let Some(rows) = self.array(key)? else {
            return Ok(None);
        };
        rows.iter()
            .enumerate()
            .map(|(i, row)| match row.as_ref() {
                Value::ArrayValue(a) => a
                    .values
                    .iter()
                    .filter_map(|v| v.value.as_ref())
                    .enumerate()
                    .map(|(j, v)| {
                        conv(v).ok_or_else(|| {
                            FieldError::new(
                                format!("attributes[{key:?}][{i}][{j}]"),
                                format!("expected {what}"),
                            )
                        })
                    })
                    .collect(),
                _ => Err(FieldError::new(
                    format!("attributes[{key:?}][{i}]"),
                    format!("expected an array of {what} for each position"),
                )),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }
}

pub fn number(v: &Value) -> Option<f64> {
    as_f64(v)
}

pub fn integer(v: &Value) -> Option<i64> {
    as_i64(v)
}

pub fn string(v: &Value) -> Option<String> {
    match v {
        Value::StringValue(s) => Some(s.clone()),
        _ => None,
    }
}

fn json_to_value(j: &serde_json::Value) -> Value {
    match j {
        serde_json::Value::String(s) => Value::StringValue(s.clone()),
        serde_json::Value::Bool(b) => Value::BoolValue(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::IntValue(i),
            None => Value::DoubleValue(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::Array(items) => {
            Value::ArrayValue(opentelemetry_proto::tonic::common::v1::ArrayValue {
                values: items
                    .iter()
                    .map(|v| AnyValue {
                        value: Some(json_to_value(v)),
                    })
                    .collect(),
            })
        }
        serde_json::Value::Null | serde_json::Value::Object(_) => Value::StringValue(j.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, KeyValue};

    fn kv(key: &str, value: Value) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(value) }),
            ..KeyValue::default()
        }
    }

    fn row(values: &[i64]) -> Value {
        Value::ArrayValue(ArrayValue {
            values: values
                .iter()
                .map(|&v| AnyValue {
                    value: Some(Value::IntValue(v)),
                })
                .collect(),
        })
    }

    #[test]
    fn nested_arrays_read_the_same_from_otlp_arrays_and_json_strings() {
        let attrs = vec![
            kv(
                "otlp",
                Value::ArrayValue(ArrayValue {
                    values: vec![
                        AnyValue {
                            value: Some(row(&[1, 2])),
                        },
                        AnyValue {
                            value: Some(row(&[3])),
                        },
                    ],
                }),
            ),
            kv("json", Value::StringValue("[[1, 2], [3]]".into())),
            kv("bad", Value::StringValue("[[1, \"x\"]]".into())),
        ];
        let a = Attrs::new(&attrs);
        let want = Some(vec![vec![1i64, 2], vec![3]]);
        assert_eq!(a.nested("otlp", "integers", integer).unwrap(), want);
        assert_eq!(a.nested("json", "integers", integer).unwrap(), want);
        let e = a.nested::<i64>("bad", "integers", integer).unwrap_err();
        assert_eq!(e.field, "attributes[\"bad\"]");
        assert!(
            e.message.contains("JSON array of arrays of integers"),
            "{}",
            e.message
        );
        assert_eq!(
            a.nested::<i64>("missing", "integers", integer).unwrap(),
            None
        );
    }
}

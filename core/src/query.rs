//! Query strings: every view's state lives in its URL, so links are views.

/// Percent-encodes a query value (everything but RFC 3986's unreserved characters).
pub fn encode(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The pairs of a query string (`?a=1&b=x%20y`), percent-decoded (`+` is a space).
pub fn parse(query: &str) -> Vec<(String, String)> {
    let decode = |v: &str| {
        let b = v.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            let hex = |c: u8| (c as char).to_digit(16);
            match b[i] {
                b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 3;
                        continue;
                    }
                    _ => out.push(b'%'),
                },
                b'+' => out.push(b' '),
                c => out.push(c),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    query
        .trim_start_matches('?')
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// `?a=1&b=x%20y` from the pairs whose value is not empty; `""` when none is.
pub fn build(pairs: &[(&str, String)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

/// An optional number as a query value (`""` for none).
pub fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_encoded_query_strings_without_empty_values() {
        assert_eq!(
            build(&[
                ("instance", "gpu-7,svc@host".into()),
                ("model", String::new()),
                ("find", "a b&c".into()),
            ]),
            "?instance=gpu-7%2Csvc%40host&find=a%20b%26c"
        );
        assert_eq!(build(&[("x", String::new())]), "");
        let pairs = [("find", "a b&c/é%".to_string()), ("n", "5".to_string())];
        let round: Vec<(String, String)> = parse(&build(&pairs));
        assert_eq!(round, pairs.map(|(k, v)| (k.to_string(), v)));
        assert_eq!(
            parse("?a=x+y&b=%zz&c"),
            [
                ("a".into(), "x y".into()),
                ("b".into(), "%zz".into()),
                ("c".into(), String::new())
            ]
        );
        assert_eq!(opt(Some(5)), "5");
        assert_eq!(opt::<i64>(None), "");
    }
}

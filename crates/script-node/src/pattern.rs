//! Matching a line against a scenario's pattern, and expanding the names a
//! scenario writes (`$a` for node a's address, `{x*300}` for 300 x's).
//!
//! A pattern is words separated by one space; a line matches when it has as
//! many words and each matches: `*` any word, `lo..hi` a decimal number in
//! that range (both ends included), `one|two` either word, else the word
//! itself.

/// Whether `line` matches `pattern`, word by word.
pub fn matches(pattern: &str, line: &str) -> bool {
    let want: Vec<&str> = pattern.split(' ').collect();
    let got: Vec<&str> = line.split(' ').collect();
    want.len() == got.len() && want.iter().zip(&got).all(|(w, g)| word_matches(w, g))
}

fn word_matches(want: &str, got: &str) -> bool {
    if want == "*" || want == got {
        return true;
    }
    if let Some((lo, hi)) = want.split_once("..") {
        if let (Ok(lo), Ok(hi), Some(value)) = (lo.parse::<f64>(), hi.parse::<f64>(), decimal(got))
        {
            return lo <= value && value <= hi;
        }
    }
    want.contains('|') && want.split('|').any(|alt| alt == got)
}

/// A protocol decimal (`5`, `4.999`), not Rust's wider float syntax.
fn decimal(text: &str) -> Option<f64> {
    let plain = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    if plain {
        text.parse().ok()
    } else {
        None
    }
}

/// Longest repetition `{c*n}` may ask for.
const MAX_REPEAT: usize = 100_000;

/// Replaces `$name` by `lookup(name)` (names are letters, digits, `-`, `_`;
/// unknown names are an error) and `{text*n}` by `text` n times.
pub fn expand(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(['$', '{']) {
        out.push_str(&rest[..at]);
        let tail = &rest[at + 1..];
        if rest.as_bytes()[at] == b'$' {
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
                .unwrap_or(tail.len());
            let name = &tail[..end];
            out.push_str(&lookup(name).ok_or_else(|| format!("unknown name ${name}"))?);
            rest = &tail[end..];
        } else {
            let end = tail.find('}').ok_or("`{` without `}`")?;
            let (unit, times) = tail[..end].rsplit_once('*').ok_or("{text*n}")?;
            let times: usize = times
                .parse()
                .map_err(|_| format!("bad count in {{{unit}*{times}}}"))?;
            if times > MAX_REPEAT {
                return Err(format!("{{..*{times}}} is over {MAX_REPEAT}"));
            }
            out.push_str(&unit.repeat(times));
            rest = &tail[end + 1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_match_exactly_by_wildcard_by_range_or_by_choice() {
        assert!(matches("A k * 30", "A k 4.998 30"));
        assert!(!matches("A k * 30", "A k 4.998 31"));
        assert!(!matches("A k * 30", "A k 5 30 x"));
        assert!(matches("A k 0..5 30", "A k 4.998 30"));
        assert!(matches("A k 0..5 30", "A k 5 30"));
        assert!(!matches("A k 0..5 30", "A k 5.001 30"));
        assert!(!matches("A k 0..5 30", "A k 1e0 30"));
        assert!(matches("no-server|unanswered", "unanswered"));
        assert!(!matches("no-server|unanswered", "timed-out"));
        assert!(!matches("A k", "A  k"), "a double space is another word");
    }

    #[test]
    fn names_and_repetitions_expand() {
        let lookup = |name: &str| (name == "a").then(|| "127.0.0.1:9".to_owned());
        assert_eq!(
            expand("M A k $a", &lookup).as_deref(),
            Ok("M A k 127.0.0.1:9")
        );
        assert_eq!(expand("k{ab*3}z", &lookup).as_deref(), Ok("kabababz"));
        assert!(expand("$b", &lookup).is_err());
        assert!(expand("{x*}", &lookup).is_err());
        assert!(expand("{x*1000000}", &lookup).is_err());
    }
}

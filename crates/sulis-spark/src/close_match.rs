//! The closest known name to a mistyped one, as Python's
//! `difflib.get_close_matches(word, known, n=1, cutoff=0.6)` picks it (the
//! source's first implementation named its hints so; the text stays).

/// The known name most like `word` with a similarity of at least 0.6, if
/// any (the later in `known` of two alike).
pub fn closest<'a>(word: &str, known: &[&'a str]) -> Option<&'a str> {
    let b: Vec<char> = word.chars().collect();
    let mut best: Option<(f64, &str)> = None;
    for &x in known {
        let a: Vec<char> = x.chars().collect();
        let total = a.len() + b.len();
        if total == 0 {
            continue;
        }
        let score = 2.0 * matching_characters(&a, &b) as f64 / total as f64;
        if score >= 0.6 && best.is_none_or(|(s, name)| (score, x) > (s, name)) {
            best = Some((score, x));
        }
    }
    best.map(|(_, name)| name)
}

/// Characters in the matching blocks of `a` and `b` (difflib's
/// `SequenceMatcher` without junk: the longest block, then recursively
/// the blocks left and right of it).
fn matching_characters(a: &[char], b: &[char]) -> usize {
    let mut total = 0;
    let mut queue = vec![(0, a.len(), 0, b.len())];
    while let Some((alo, ahi, blo, bhi)) = queue.pop() {
        let (i, j, k) = longest_match(a, b, alo, ahi, blo, bhi);
        if k == 0 {
            continue;
        }
        total += k;
        if alo < i && blo < j {
            queue.push((alo, i, blo, j));
        }
        if i + k < ahi && j + k < bhi {
            queue.push((i + k, ahi, j + k, bhi));
        }
    }
    total
}

/// The longest common block of `a[alo..ahi]` and `b[blo..bhi]`: the
/// earliest in `a` of the longest, then the earliest in `b`.
fn longest_match(
    a: &[char],
    b: &[char],
    alo: usize,
    ahi: usize,
    blo: usize,
    bhi: usize,
) -> (usize, usize, usize) {
    let (mut besti, mut bestj, mut bestsize) = (alo, blo, 0);
    // Lengths of the matches ending at each j of the previous row.
    let mut prev = vec![0usize; b.len() + 1];
    for (i, &ai) in a.iter().enumerate().take(ahi).skip(alo) {
        let mut row = vec![0usize; b.len() + 1];
        for (j, &bj) in b.iter().enumerate().take(bhi).skip(blo) {
            if ai != bj {
                continue;
            }
            let k = if j > 0 { prev[j - 1] } else { 0 } + 1;
            row[j] = k;
            if k > bestsize {
                besti = i + 1 - k;
                bestj = j + 1 - k;
                bestsize = k;
            }
        }
        prev = row;
    }
    (besti, bestj, bestsize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_what_difflib_picks() {
        // Checked against Python 3.11's difflib.get_close_matches(word, known, 1).
        let known = ["streamId", "startingPositions", "channel", "minPartitions"];
        assert_eq!(
            closest("streamid", &["streamid", "channel"]),
            Some("streamid")
        );
        assert_eq!(closest("stremid", &known), Some("streamId"));
        assert_eq!(
            closest("stremid", &["streamid", "startingpositions"]),
            Some("streamid")
        );
        assert_eq!(
            closest("chanel", &["channel", "replaychannel"]),
            Some("channel")
        );
        assert_eq!(closest("xyz", &["channel"]), None);
    }
}

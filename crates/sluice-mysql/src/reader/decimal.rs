//! DECIMAL values of a rows event read straight to their text.
//!
//! `mysql_common` decodes a DECIMAL into groups of nine digits and prints
//! them through `fmt`, a tenth of a microsecond per value: on a bulk load
//! with one DECIMAL column, a twentieth of what the reader did. This
//! writes the same text as its `Display` from the same bytes, digit by
//! digit. Anything it would not read the same way (a column definition
//! out of range, a group that is not digits) is left to `mysql_common`.

/// Bytes holding a group of 0 to 9 digits.
const GROUP_BYTES: [usize; 10] = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4];

const DIGITS_PER_GROUP: usize = 9;

/// Ten to the number of digits in a group: one more than its largest.
const POWERS_OF_TEN: [u32; 10] =
    [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000, 100_000_000, 1_000_000_000];

/// The largest precision and scale a DECIMAL column can have.
const MAX_PRECISION: usize = 65;
const MAX_SCALE: usize = 30;

/// Room for the most groups a value has: nine, for 65 digits with one
/// after the point (a group of one and seven of nine, then one of one).
const MAX_GROUPS: usize = 12;

/// The text of the DECIMAL(`meta[0]`, `meta[1]`) at the start of `bytes`,
/// and how many bytes it took; `None` to leave the value to `mysql_common`.
pub(super) fn read(bytes: &[u8], meta: &[u8]) -> Option<(Vec<u8>, usize)> {
    let (precision, scale) = match meta {
        [precision, scale, ..] => (usize::from(*precision), usize::from(*scale)),
        _ => return None,
    };
    if precision > MAX_PRECISION || scale > MAX_SCALE || scale > precision {
        return None;
    }
    // The sign is the first bit, stored flipped; a negative value has
    // every bit of its digits inverted.
    let negative = bytes.first()? & 0x80 == 0;
    let mut groups = [(0u32, 0usize); MAX_GROUPS];
    let mut count = 0;
    let mut at = 0;
    for digits in group_widths(precision - scale, scale) {
        let width = GROUP_BYTES[digits];
        let mut group = bytes.get(at..at + width)?.iter().fold(0u32, |v, b| (v << 8) | u32::from(*b));
        if at == 0 {
            group ^= 0x80 << (8 * (width - 1));
        }
        if negative {
            group ^= u32::MAX >> (32 - 8 * width);
        }
        if group >= POWERS_OF_TEN[digits] {
            return None;
        }
        *groups.get_mut(count)? = (group, digits);
        count += 1;
        at += width;
    }
    let groups = &groups[..count];
    let int_groups = groups.len() - scale.div_ceil(DIGITS_PER_GROUP);
    let (int, frac) = groups.split_at(int_groups);
    let leading = int.iter().take_while(|(group, _)| *group == 0).count();
    let int = &int[leading..];
    let mut text = Vec::with_capacity(precision + 3);
    // All zeros with no fraction is `0`, unsigned, whatever the sign bit.
    if int.is_empty() && frac.is_empty() {
        text.push(b'0');
        return Some((text, at));
    }
    if negative {
        text.push(b'-');
    }
    match int.split_first() {
        Some(((group, _), rest)) => {
            text.extend_from_slice(itoa::Buffer::new().format(*group).as_bytes());
            for (group, _) in rest {
                push_padded(&mut text, *group, DIGITS_PER_GROUP);
            }
        }
        None => text.push(b'0'),
    }
    if !frac.is_empty() {
        text.push(b'.');
        for (group, digits) in frac {
            push_padded(&mut text, *group, *digits);
        }
    }
    Some((text, at))
}

/// The digits of each group in the order they are stored: a short group
/// of the integer part's leftover digits first, then whole groups, then
/// the fraction's whole groups and a short group of its leftover digits.
fn group_widths(int_digits: usize, scale: usize) -> impl Iterator<Item = usize> {
    let int_head = int_digits % DIGITS_PER_GROUP;
    let frac_tail = scale % DIGITS_PER_GROUP;
    let int = std::iter::repeat_n(int_head, usize::from(int_head > 0))
        .chain(std::iter::repeat_n(DIGITS_PER_GROUP, int_digits / DIGITS_PER_GROUP));
    let frac = std::iter::repeat_n(DIGITS_PER_GROUP, scale / DIGITS_PER_GROUP)
        .chain(std::iter::repeat_n(frac_tail, usize::from(frac_tail > 0)));
    int.chain(frac)
}

/// `group` with zeros in front, `digits` wide.
fn push_padded(text: &mut Vec<u8>, mut group: u32, digits: usize) {
    let mut printed = [b'0'; DIGITS_PER_GROUP];
    for slot in printed.iter_mut().take(digits).rev() {
        *slot = b'0' + (group % 10) as u8;
        group /= 10;
    }
    text.extend_from_slice(&printed[..digits.min(DIGITS_PER_GROUP)]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use mysql_common::binlog::decimal::Decimal;

    /// A column's bytes for `groups` (each below ten to its digits), as
    /// the server stores them: big-endian groups, every bit inverted when
    /// negative, then the first bit flipped.
    fn stored(groups: &[(u32, usize)], negative: bool) -> Vec<u8> {
        let mut bytes = Vec::new();
        for (group, digits) in groups {
            let width = GROUP_BYTES[*digits];
            bytes.extend_from_slice(&group.to_be_bytes()[4 - width..]);
        }
        if negative {
            bytes.iter_mut().for_each(|b| *b = !*b);
        }
        bytes[0] ^= 0x80;
        bytes
    }

    #[test]
    fn every_value_reads_as_mysql_common_prints_it() {
        let mut seed = 7u64;
        let mut next = |below: u32| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((seed >> 33) % u64::from(below)) as u32
        };
        let mut checked = 0;
        for precision in 1..=MAX_PRECISION {
            for scale in 0..=precision.min(MAX_SCALE) {
                for round in 0..12 {
                    let groups: Vec<(u32, usize)> = group_widths(precision - scale, scale)
                        .map(|digits| {
                            let limit = 10u32.pow(digits as u32);
                            // Zeros (leading ones are dropped), nines, and
                            // values of every length.
                            let group = match (round, next(4)) {
                                (0, _) | (_, 0) => 0,
                                (1, _) => limit - 1,
                                _ => next(limit) / 10u32.pow(next(digits as u32 + 1)),
                            };
                            (group, digits)
                        })
                        .collect();
                    let mut bytes = stored(&groups, round % 2 == 1);
                    bytes.extend_from_slice(b"rest");
                    let meta = [precision as u8, scale as u8];
                    let (ours, used) = read(&bytes, &meta).unwrap();
                    let theirs = Decimal::read_bin(&bytes[..], precision, scale, false).unwrap().to_string();
                    assert_eq!(String::from_utf8(ours).unwrap(), theirs, "{groups:?} in DECIMAL({precision},{scale})");
                    assert_eq!(&bytes[used..], b"rest");
                    checked += 1;
                }
            }
        }
        assert!(checked > 10_000, "{checked}");
    }

    #[test]
    fn what_it_would_read_differently_is_left_to_mysql_common() {
        // Too short, a scale above the precision, a width past the limits.
        assert_eq!(read(&[0x80], &[12, 2]), None);
        assert_eq!(read(&[0x80; 8], &[2, 4]), None);
        assert_eq!(read(&[0x80; 40], &[66, 0]), None);
        assert_eq!(read(&[0x80; 8], &[12]), None);
        // A group that is not nine digits: 0x3B9ACA00 is ten to the ninth.
        assert_eq!(read(&[0x80, 0x3B, 0x9A, 0xCA, 0x00], &[10, 0]), None);
        assert_eq!(read(&[0x80 | 0x3B, 0x9A, 0xCA, 0x00], &[9, 0]), None);
    }
}

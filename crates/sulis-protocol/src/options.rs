//! One table of options per service (the driver's, the archive's, next the
//! cluster's): each row names an option, its environment variable, its unit
//! and a sentence of doc, and how to set and show it on the service's
//! context. The table alone makes the defaults' overrides from the
//! environment, the Python keywords, the `sulis` flags, `--print-config`
//! and the service's section of `docs/config.md`, so none of them can drift
//! from the others.

/// Where an effective setting came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Built-in default.
    Default,
    /// A `SULIS_*` environment variable.
    Environment,
    /// Set explicitly (API argument or command-line flag).
    Explicit,
}

impl Source {
    /// Lower-case name.
    pub fn name(&self) -> &'static str {
        match self {
            Source::Default => "default",
            Source::Environment => "environment",
            Source::Explicit => "explicit",
        }
    }
}

/// One row of a service's options table, for context type `C`.
pub struct OptionSpec<C: 'static> {
    /// Field name (also the flag name with `-` for `_`).
    pub name: &'static str,
    /// Environment variable.
    pub env: &'static str,
    /// Unit shown to users (`duration` values are parsed with a unit).
    pub unit: &'static str,
    /// One sentence of documentation.
    pub doc: &'static str,
    /// Parses `text` into the context.
    pub set: fn(&mut C, &str) -> Result<(), String>,
    /// The context's value as text.
    pub get: fn(&C) -> String,
}

/// A row of a table: `option!(field, "ENV", "unit", "doc", parse, show)`, or
/// `option!(field as "shown", ...)` for a field whose user-facing name
/// differs (durations: `x_ns` is shown as `x`). `parse` turns text into the
/// field's type, `show` the field into text.
#[macro_export]
macro_rules! option {
    ($name:ident, $env:literal, $unit:literal, $doc:literal, $parse:expr, $show:expr) => {
        $crate::option!($name as stringify!($name), $env, $unit, $doc, $parse, $show)
    };
    ($name:ident as $shown:expr, $env:literal, $unit:literal, $doc:literal, $parse:expr, $show:expr) => {
        $crate::options::OptionSpec {
            name: $shown,
            env: $env,
            unit: $unit,
            doc: $doc,
            set: |c, s| {
                c.$name = ($parse)(s)?;
                Ok(())
            },
            get: |c| ($show)(&c.$name),
        }
    };
}

/// Which options were set, and how (the rest are defaults).
#[derive(Clone, Debug, Default)]
pub struct Sources(Vec<(&'static str, Source)>);

impl Sources {
    fn mark(&mut self, name: &'static str, source: Source) {
        self.0.retain(|(n, _)| *n != name);
        self.0.push((name, source));
    }

    fn of(&self, name: &str) -> Source {
        self.0
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, s)| *s)
            .unwrap_or(Source::Default)
    }
}

/// A service's context configured by its table.
pub trait Configured: Sized + 'static {
    /// What the options configure ("driver", "archive"), in messages.
    const WHAT: &'static str;
    /// The options table.
    fn table() -> &'static [OptionSpec<Self>];
    /// Where each setting came from.
    fn sources_mut(&mut self) -> &mut Sources;
    /// Where each setting came from.
    fn sources(&self) -> &Sources;

    /// Applies every option whose environment variable is set.
    fn apply_env(&mut self) -> Result<(), String> {
        for o in Self::table() {
            if let Ok(v) = std::env::var(o.env) {
                (o.set)(self, &v).map_err(|e| format!("{}={v}: {e}", o.env))?;
                self.sources_mut().mark(o.name, Source::Environment);
            }
        }
        Ok(())
    }

    /// Sets an option by name (`term_buffer_length` or `term-buffer-length`) from text.
    fn set_option(&mut self, name: &str, value: &str) -> Result<(), String> {
        let table = Self::table();
        let key = name.replace('-', "_");
        let o = table.iter().find(|o| o.name == key).ok_or_else(|| {
            match key.strip_suffix("_ns") {
                Some(base) if table.iter().any(|o| o.name == base) => format!(
                    "unknown {} option '{name}': durations are named without a unit, use '{base}' (e.g. {base}=5s)",
                    Self::WHAT
                ),
                _ => {
                    // As a channel URI's unknown key: the closest known name, when one is close.
                    let closest = table
                        .iter()
                        .map(|o| (crate::uri::edit_distance(&key, o.name), o.name))
                        .min();
                    match closest {
                        Some((distance, known)) if distance <= 2.max(key.len() / 5) => format!(
                            "unknown {} option '{name}' (did you mean '{known}'?)",
                            Self::WHAT
                        ),
                        _ => format!("unknown {} option '{name}'", Self::WHAT),
                    }
                }
            }
        })?;
        (o.set)(self, value).map_err(|e| format!("{name}={value}: {e}"))?;
        self.sources_mut().mark(o.name, Source::Explicit);
        Ok(())
    }

    /// Every option with its effective value and where it came from.
    fn describe_options(&self) -> Vec<(&'static OptionSpec<Self>, String, Source)> {
        Self::table()
            .iter()
            .map(|o| (o, (o.get)(self), self.sources().of(o.name)))
            .collect()
    }
}

/// The text of an optional value: empty for none.
pub fn show_optional<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map(|x| x.to_string()).unwrap_or_default()
}

/// An optional value from text: none for empty text.
pub fn parse_optional<T>(
    s: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Option<T>, String> {
    if s.is_empty() {
        Ok(None)
    } else {
        parse(s).map(Some)
    }
}

/// Text as itself (a table's parser for text options).
pub fn parse_text(s: &str) -> Result<String, String> {
    Ok(s.to_string())
}

/// A number; an error quotes the text.
pub fn parse_int<T: std::str::FromStr>(s: &str) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    s.trim().parse::<T>().map_err(|e| format!("{s:?}: {e}"))
}

/// Any value as its text.
pub fn show<T: std::fmt::Display + ?Sized>(v: &T) -> String {
    v.to_string()
}

/// A duration with a unit (`5s`, `200ms`), or seconds.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    crate::values::parse_duration_option(s).map(std::time::Duration::from_nanos)
}

/// A duration as a table shows it (`5s`, `200ms`).
pub fn show_duration(d: &std::time::Duration) -> String {
    crate::values::format_duration_ns(d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Ctx {
        level: u8,
        timeout_ns: u64,
        sources: Sources,
    }

    static TABLE: &[OptionSpec<Ctx>] = &[
        crate::option!(
            level,
            "SULIS_TEST_OPTIONS_LEVEL",
            "",
            "A level.",
            |s: &str| s.parse::<u8>().map_err(|e| e.to_string()),
            |v: &u8| v.to_string()
        ),
        crate::option!(
            timeout_ns as "timeout",
            "SULIS_TEST_OPTIONS_TIMEOUT",
            "duration",
            "A timeout.",
            crate::values::parse_duration_option,
            |v: &u64| crate::values::format_duration_ns(*v)
        ),
    ];

    impl Configured for Ctx {
        const WHAT: &'static str = "test";
        fn table() -> &'static [OptionSpec<Self>] {
            TABLE
        }
        fn sources_mut(&mut self) -> &mut Sources {
            &mut self.sources
        }
        fn sources(&self) -> &Sources {
            &self.sources
        }
    }

    #[test]
    fn should_set_by_either_spelling_and_say_where_each_value_came_from() {
        let mut c = Ctx::default();
        c.set_option("level", "3").unwrap();
        c.set_option("timeout", "1.5s").unwrap();
        assert_eq!((c.level, c.timeout_ns), (3, 1_500_000_000));
        let d = c.describe_options();
        assert_eq!(d[0].1, "3");
        assert_eq!(d[0].2, Source::Explicit);
        assert_eq!(d[1].1, "1500ms");
    }

    #[test]
    fn should_name_the_service_and_hint_at_durations_in_errors() {
        let mut c = Ctx::default();
        assert_eq!(
            c.set_option("timeout_ns", "5").unwrap_err(),
            "unknown test option 'timeout_ns': durations are named without a unit, use 'timeout' (e.g. timeout=5s)"
        );
        assert_eq!(
            c.set_option("colour", "red").unwrap_err(),
            "unknown test option 'colour'"
        );
        assert_eq!(
            c.set_option("levle", "3").unwrap_err(),
            "unknown test option 'levle' (did you mean 'level'?)"
        );
        assert!(c
            .set_option("level", "300")
            .unwrap_err()
            .starts_with("level=300: "));
        assert_eq!(c.describe_options()[0].2, Source::Default);
    }
}

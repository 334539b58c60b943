//! What the sink list in `lib.rs` generates, and what it asks of each
//! sink's folder.
//!
//! A sink's folder `<module>/` provides, always compiled:
//! - its config struct (serde, `deny_unknown_fields`) with `id: String`,
//!   `required: bool` and `buffer: BufferConfig` fields, re-exported from the folder's root;
//! - `impl SinkSettings` for that struct: the guarantee it declares (the
//!   only place it is written; the built sink's `Sink::guarantee` returns
//!   the same call), its checks, its target and its preflight;
//!
//! and, behind the sink's cargo feature when it has one,
//! `pub fn build(&Config, &SinkContext) -> Box<dyn Sink>`.

use std::path::{Path, PathBuf};

use sluice_core::Guarantee;
use sluice_core::settings::Invalid;

use crate::target::Target;

/// A sink's config as the registry sees it.
pub trait SinkSettings {
    /// What the sink promises as configured.
    fn guarantee(&self) -> Guarantee;

    /// Pure checks of the config; `at` is the config's field path, e.g.
    /// `pipelines[0].sinks[1].config`.
    fn validate(&self, _at: &str) -> Result<(), Invalid> {
        Ok(())
    }

    /// What the sink writes, for the shared-target check; `resolve` maps a
    /// configured path to the one compared. `None`: nothing another sink
    /// could also write.
    fn target(&self, _resolve: &dyn Fn(&Path) -> PathBuf) -> Option<Target> {
        None
    }

    /// Checks that look at the disk without writing anything. Returns the
    /// field (relative to the sink's `config`) and the problem.
    fn preflight(&self) -> Result<(), (&'static str, String)> {
        Ok(())
    }
}

/// The preflight of files a sink reads (CA bundles, certificates, keys):
/// each one set must be readable. Returns the first field that is not.
pub(crate) fn readable_files(files: &[(&'static str, Option<&Path>)]) -> Result<(), (&'static str, String)> {
    for (field, path) in files {
        if let Some(path) = path
            && let Err(e) = std::fs::File::open(path)
        {
            return Err((field, format!("cannot read {}: {e}", path.display())));
        }
    }
    Ok(())
}

/// A client certificate needs its key, and a key its certificate.
pub(crate) fn certificate_pair(
    at: &str,
    cert_file: &Option<std::path::PathBuf>,
    key_file: &Option<std::path::PathBuf>,
) -> Result<(), sluice_core::settings::Invalid> {
    if cert_file.is_some() == key_file.is_some() {
        return Ok(());
    }
    let missing = if cert_file.is_none() { "cert_file" } else { "key_file" };
    Err(sluice_core::settings::Invalid::new(
        format!("{at}.{missing}"),
        "a client certificate needs both cert_file and key_file",
        "set both, or neither",
    ))
}

/// A sink's default for `required`: a sink someone configured is assumed
/// to matter until they say it does not.
pub const DEFAULT_REQUIRED: bool = true;

pub fn default_required() -> bool {
    DEFAULT_REQUIRED
}

/// What a reader of an at-least-once line sink drops repeats by, which
/// depends on the envelope: Debezium's carries no Sluice event id.
pub fn line_dedup(format: &sluice_format::FormatConfig) -> &'static str {
    match format.envelope {
        sluice_format::Envelope::Native => "event id",
        sluice_format::Envelope::Debezium => "source position (source.lsn, or source.file, pos and row)",
        sluice_format::Envelope::Cloudevents => "CloudEvents id (the event id)",
    }
}

/// Expands the sink list into the modules, the `SinkConfig` enum, its
/// dispatch, [`build`](crate::build) and [`SINK_TYPES`](crate::SINK_TYPES).
macro_rules! sink_registry {
    ($( ($variant:ident, $module:ident, $name:literal, $config:ident $(, $feature:literal)?) ),* $(,)?) => {
        $( pub mod $module; )*
        $( pub use $module::$config; )*

        /// One sink of a pipeline: `{ type, config }` in YAML.
        #[derive(Debug, Clone, serde::Deserialize)]
        #[serde(tag = "type", content = "config", rename_all = "snake_case", deny_unknown_fields)]
        pub enum SinkConfig {
            $( $variant($config), )*
        }

        /// Every sink type, in list order, and whether this build has it.
        pub const SINK_TYPES: &[(&str, bool)] = &[ $( ($name, true $(&& cfg!(feature = $feature))?), )* ];

        impl SinkConfig {
            /// The per-sink behaviour behind the config.
            pub fn settings(&self) -> &dyn SinkSettings {
                match self {
                    $( SinkConfig::$variant(c) => c, )*
                }
            }

            pub fn id(&self) -> &str {
                match self {
                    $( SinkConfig::$variant(c) => &c.id, )*
                }
            }

            pub fn required(&self) -> bool {
                match self {
                    $( SinkConfig::$variant(c) => c.required, )*
                }
            }

            /// The sink's buffer limits, defaults applied.
            pub fn buffer_limits(&self) -> crate::BufferLimits {
                match self {
                    $( SinkConfig::$variant(c) => c.buffer.limits(c.required), )*
                }
            }

            /// The sink's buffer settings as written.
            pub fn buffer(&self) -> &crate::BufferConfig {
                match self {
                    $( SinkConfig::$variant(c) => &c.buffer, )*
                }
            }

            pub fn type_name(&self) -> &'static str {
                match self {
                    $( SinkConfig::$variant(_) => $name, )*
                }
            }

            /// The sink's own transforms, as the config lists them.
            pub fn transforms(&self) -> &[sluice_transform::TransformConfig] {
                match self {
                    $( SinkConfig::$variant(c) => &c.transforms, )*
                }
            }

            pub fn delivery(&self) -> crate::Delivery {
                match self {
                    $( SinkConfig::$variant(c) => c.delivery, )*
                }
            }

            /// The guarantee the sink declares as configured (the built
            /// sink reports the same through `Sink::guarantee`), unless
            /// its delivery is at-most-once, which the coordinator makes.
            pub fn guarantee(&self) -> sluice_core::Guarantee {
                match self.delivery() {
                    crate::Delivery::AtMostOnce => sluice_core::Guarantee::AtMostOnce,
                    crate::Delivery::AtLeastOnce => self.settings().guarantee(),
                }
            }
        }

        impl SinkConfig {
            /// Whether this build has the sink's code: its cargo feature,
            /// where it has one.
            pub fn built(&self) -> Result<(), NotBuilt> {
                #[allow(unreachable_patterns)]
                match self {
                    $(
                        $(
                            #[cfg(not(feature = $feature))]
                            SinkConfig::$variant(_) => Err(NotBuilt($name)),
                        )?
                    )*
                    _ => Ok(()),
                }
            }
        }

        /// Builds the sink a config describes. Connecting and recovery
        /// happen in `Sink::open`, which the coordinator calls.
        pub fn build(config: &SinkConfig, context: &SinkContext) -> Result<Box<dyn Sink>, NotBuilt> {
            match config {
                $(
                    $( #[cfg(feature = $feature)] )?
                    SinkConfig::$variant(c) => Ok($module::build(c, context)),
                    $(
                        #[cfg(not(feature = $feature))]
                        SinkConfig::$variant(_) => Err(NotBuilt($name)),
                    )?
                )*
            }
        }
    };
}
pub(crate) use sink_registry;

//! `versions!`: a day's versions, declared once. Each version is an enum variant with the name
//! `--kernel` takes; from that one list the macro writes `ALL` (in the order the table lists
//! them), `NAMES` (for `--kernel`'s help), `name` and `from_name`, so the four cannot disagree.

/// Declares a version enum and its `--kernel` names:
///
/// ```
/// common::versions! {
///     /// The day's kernels.
///     pub enum Version {
///         /// One thread per element.
///         Naive => "naive",
///         Vec4 => "vec4",
///     }
/// }
/// assert_eq!(Version::ALL, [Version::Naive, Version::Vec4]);
/// assert_eq!(Version::NAMES, ["naive", "vec4"]);
/// assert_eq!(Version::from_name("vec4"), Some(Version::Vec4));
/// assert_eq!(Version::Naive.name(), "naive");
/// ```
#[macro_export]
macro_rules! versions {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident => $label:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant ),+
        }

        #[allow(dead_code)]
        impl $name {
            /// Every version, in the order the table lists them.
            pub const ALL: [$name; [$($label),+].len()] = [$($name::$variant),+];

            /// Every version's `--kernel` name, in the same order.
            pub const NAMES: [&'static str; [$($label),+].len()] = [$($label),+];

            /// The name `--kernel` takes.
            pub const fn name(self) -> &'static str {
                match self {
                    $( $name::$variant => $label ),+
                }
            }

            /// The version `--kernel NAME` means, if any.
            pub fn from_name(name: &str) -> Option<Self> {
                Self::ALL.into_iter().find(|v| v.name() == name)
            }
        }
    };
}

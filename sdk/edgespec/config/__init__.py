"""Typed, frozen, validated configuration: the single source of truth for a recipe.

YAML files, ``FIELD=VALUE`` overrides and CLI flags only ever *produce* these objects. Every
construction checks every field; an unknown or invalid field raises `EdgespecError` naming
its dotted path (``recipe field 'quant.scheme': ...``).

One module per concern; every public name is importable from ``edgespec.config``:

- `edgespec.config.records`: the typed-record machinery (`Record`, `from_dict`, `require`,
  `parsing`), which the bundle manifest's records use too;
- `edgespec.config.lm_sections`: a language-model recipe's sections and `Recipe`;
- `edgespec.config.asr_sections`: a speech recognition recipe's sections and `AsrRecipe`;
- `edgespec.config.override_grammar`: ``FIELD=VALUE`` overrides (`apply_overrides`);
- `edgespec.config.migrations`: recipes of earlier versions (`upgrade_recipe_data`, `RecipeDeprecation`);
- `edgespec.config.recipe_files`: reading and writing recipe files (`load_recipe`, `recipe_from_args`,
  `recipe_to_yaml`, `RECIPE_KINDS`: the task kinds, `check_task_kinds`);
- `edgespec.config.yaml_syntax`: YAML as recipes read it.
"""

from edgespec.config.asr_sections import AsrGatesConfig, AsrRecipe, AsrValidateConfig, CtcConfig, SpeechModelConfig, StreamingConfig
from edgespec.config.lm_sections import (
    SUITE_NAMES,
    TASK_SUITE_PREFIX,
    DistillConfig,
    DrafterConfig,
    ExportConfig,
    GatesConfig,
    ModelConfig,
    NumericsConfig,
    QuantConfig,
    QuantScheme,
    Recipe,
    TrainConfig,
    TuneConfig,
    ValidateConfig,
)
from edgespec.config.migrations import RecipeDeprecation, upgrade_recipe_data
from edgespec.config.override_grammar import apply_overrides
from edgespec.config.recipe_files import RECIPE_KINDS, check_task_kinds, load_recipe, recipe_from_args, recipe_to_yaml
from edgespec.config.records import Record, field_types, from_dict, parsing, require

__all__ = [
    "RECIPE_KINDS",
    "SUITE_NAMES",
    "TASK_SUITE_PREFIX",
    "AsrGatesConfig",
    "AsrRecipe",
    "AsrValidateConfig",
    "CtcConfig",
    "DistillConfig",
    "DrafterConfig",
    "ExportConfig",
    "GatesConfig",
    "ModelConfig",
    "NumericsConfig",
    "QuantConfig",
    "QuantScheme",
    "Recipe",
    "RecipeDeprecation",
    "Record",
    "SpeechModelConfig",
    "StreamingConfig",
    "TrainConfig",
    "TuneConfig",
    "ValidateConfig",
    "apply_overrides",
    "check_task_kinds",
    "field_types",
    "from_dict",
    "load_recipe",
    "parsing",
    "recipe_from_args",
    "recipe_to_yaml",
    "require",
    "upgrade_recipe_data",
]

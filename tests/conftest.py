import os
import re

import matplotlib
import numpy as np
import pytest
from hypothesis import HealthCheck, settings

matplotlib.use("Agg")

# Property-based and fuzz tests: "ci" (the default) is small and reproducible, so that the whole
# fuzzing suite stays well under a minute on two cores; HYPOTHESIS_PROFILE=long explores far more.
# Tests that set max_examples themselves keep it; the fuzz tests scale theirs from the profile.
_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile("ci", max_examples=12, deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=_QUIET)
settings.register_profile("long", max_examples=400, deadline=None, print_blob=True, suppress_health_check=_QUIET)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# `make test-fast` (pytest -m "not slow"): the tests below carry the `slow` marker. For a sweep (a
# parametrized test) every case but the first is slow: the first stays in the quick suite as that
# sweep's comparison with its reference ("cases:ID": only the cases whose id holds ID are slow).
# A test without cases is slow as a whole only where another test compares with the same
# reference in the quick suite. Bad-input checks (_BAD_INPUT), the fuzz suite's bad inputs and
# check_estimator's first configuration are never slow. Times: the whole suite's junit durations
# on the shared 2-core machine (load ~5): 823 s in all, 618 s of them marked slow here.
SLOW = {
    # sweeps: every case but the first
    "tests/test_array_api.py::test_flexattention_formulation_equals_numpy": "sweep",  # 18.9 s, 32 cases, the first 3.10 s
    "tests/test_array_api.py::test_knn_bandwidths_and_metrics_on_tensors_equal_numpy": "sweep",  # 9.2 s, 60 cases, the first 0.02 s
    "tests/test_array_api.py::test_mean_shift_on_tensors_equals_numpy": "sweep",  # 2.8 s, 10 cases, the first 0.17 s
    "tests/test_bandwidth_selectors.py::test_sj_equals_live_r": "sweep",  # 1.6 s, 5 cases, the first 0.27 s
    "tests/test_binned.py::test_binned_equals_exact_to_the_bound": "sweep",  # 5.6 s, 30 cases, the first 0.07 s
    "tests/test_cluster.py::test_uniform_kernel_reproduces_sklearn_on_blobs": "sweep",  # 5.8 s, 7 cases, the first 1.27 s
    "tests/test_cluster.py::test_zero_estimated_bandwidth_clusters_duplicates_as_scikit_learn": "sweep",  # 1.8 s, 9 cases, the first 0.13 s
    "tests/test_dask.py::test_estimators_fitted_in_memory_map_dask_query_chunks": "sweep",  # 4.7 s, 11 cases, the first 1.87 s
    "tests/test_dask.py::test_fixed_bandwidth_leave_one_out_and_sample_weight": "sweep",  # 3.1 s, 2 cases, the first 1.59 s
    "tests/test_dask.py::test_knn_kernel_and_leave_one_out_equal_in_memory": "sweep",  # 10.3 s, 6 cases, the first 1.74 s
    "tests/test_dask.py::test_mean_shift_on_dask": "whole",  # 11.2 s, 2 cases, the first 7.21 s
    "tests/test_dask.py::test_other_metrics_equal_in_memory": "sweep",  # 1.9 s, 3 cases, the first 0.61 s
    "tests/test_dask.py::test_profiles_equal_in_memory": "whole",  # 21.7 s, 9 cases, the first 11.93 s
    "tests/test_dask_weights.py::test_compact_knn_with_zero_weights": "sweep",  # 43.3 s, 48 cases, the first 1.76 s
    "tests/test_dask_weights.py::test_leave_one_out_with_zero_weights": "sweep",  # 6.2 s, 12 cases, the first 0.76 s
    "tests/test_density.py::test_1d_density_integrates_to_one": "sweep",  # 8.7 s, 6 cases, the first 0.85 s
    "tests/test_density_array_api.py::test_every_bandwidth_form_on_tensors_equals_numpy": "sweep",  # 8.3 s, 12 cases, the first 0.29 s
    "tests/test_engine_numerics.py::test_the_three_evaluations_of_a_profile_agree": "sweep",  # 1.7 s, 10 cases, the first 0.22 s
    "tests/test_interrupts.py::test_ctrl_c_during_loess_predict_is_a_keyboard_interrupt": "sweep",  # 2.9 s, 2 cases, the first 0.59 s
    "tests/test_kernel_density_estimator.py::test_sampled_radii_follow_the_profile": "sweep",
    "tests/test_kernel_learning.py::test_joint_cv_at_least_as_good_as_statsmodels_cv_ls": "sweep",  # 35 s, 8 cases, the first 4.2 s (load 12)  # 4.8 s, 10 cases, the first 0.38 s
    "tests/test_knn_coincident.py::test_local_polynomial_at_a_point_of_many_samples": "sweep",  # 2.4 s, 3 cases, the first 0.02 s
    "tests/test_loess_surface.py::test_interpolated_surface_equals_r": "sweep",  # 5.3 s, 10 cases, the first 0.44 s
    "tests/test_loo_twins.py::test_cv_bandwidth_is_that_of_the_distinct_rows": "sweep",  # 1.9 s, 4 cases, the first 0.23 s
    "tests/test_nn_dropin.py::test_masks_and_unbatched_input_like_multihead_attention": "sweep",  # 6.5 s, 48 cases, the first 0.23 s
    "tests/test_nn_dropin.py::test_transformer_encoder_stacks_local_layers": "sweep",  # 4.0 s, 2 cases, the first 2.01 s
    "tests/test_nn_flex.py::test_block_masks_from_the_blocks_bounds_equal_torchs_dense_construction": "sweep",  # 1.9 s, 12 cases, the first 0.12 s
    "tests/test_nn_functional.py::test_every_path_has_gradients_of_gradients": "sweep",  # 12.5 s, 18 cases, the first 0.75 s
    "tests/test_nn_functional.py::test_every_path_takes_views_of_q_k_v_and_masks": "sweep",  # 11.9 s, 95 cases, the first 0.16 s
    "tests/test_nn_modules.py::test_attention_equals_multihead_attention": "sweep",  # 5.1 s, 4 cases, the first 1.08 s
    "tests/test_nn_streaming.py::test_forward_matches_dense_float64_reference": "sweep",  # 22.5 s, 231 cases, the first 0.05 s
    "tests/test_nn_streaming.py::test_fused_paths_match_dense_reference": "sweep",  # 12.3 s, 32 cases, the first 0.07 s
    "tests/test_nn_streaming.py::test_gradients_match_autograd_of_dense_reference": "sweep",  # 8.0 s, 33 cases, the first 0.01 s
    "tests/test_nn_streaming.py::test_logits_beyond_the_float_range_give_the_limit": "sweep",  # 14.0 s, 24 cases, the first 0.52 s
    "tests/test_nn_streaming.py::test_top_k_streams_and_matches_dense_reference": "sweep",  # 23.9 s, 15 cases, the first 0.76 s
    "tests/test_nn_triton.py::test_every_kernel_matches_the_float64_reference_causal": "sweep",  # 27.9 s, 11 cases, the first 2.24 s
    "tests/test_nn_triton.py::test_far_from_the_origin_keeps_float32_digits": "sweep",  # 6.8 s, 3 cases, the first 2.14 s
    "tests/test_nn_triton.py::test_float16": "sweep",  # 2.6 s, 3 cases, the first 0.92 s
    "tests/test_nn_triton.py::test_windows_skip_key_blocks_and_match": "sweep",  # 39.8 s, 10 cases, the first 2.35 s
    "tests/test_nonlocal_block.py::test_gradients_are_finite_for_every_kernel": "sweep",  # 2.6 s, 11 cases, the first 0.17 s
    "tests/test_nonlocal_block.py::test_memory_at_16384_positions_is_far_below_one_dense_map": "whole",  # 25.7 s, 2 cases, the first 14.11 s
    "tests/test_polynomial.py::test_frequency_weights_are_repeated_rows_for_every_span": "sweep",  # 2.4 s, 14 cases, the first 0.32 s
    "tests/test_sample_weight.py::test_mean_shift_integer_weights_are_sklearn_on_repeated_rows": "sweep",  # 2.8 s, 4 cases, the first 1.35 s
    "tests/test_selection.py::test_cv_with_integer_weights_selects_the_repeated_rows_bandwidth": "sweep",  # 4.2 s, 3 cases, the first 0.22 s
    "tests/test_semi_supervised.py::test_float32_in_float32_out": "sweep",  # 2.9 s, 5 cases, the first 0.33 s
    "tests/test_uniform_edge.py::test_every_path_keeps_the_samples_at_the_edge": "sweep",  # 5.8 s, 2 cases, the first 2.82 s
    # shorter sweeps, and check_estimator on further configurations of one estimator
    "tests/test_array_api.py::test_fixed_bandwidth_metrics_on_tensors_equal_numpy": "sweep",  # 1.3 s, 16 cases, the first 0.23 s
    "tests/test_bandwidth_selectors.py::test_isj_equals_kdepy": "sweep",  # 1.4 s, 13 cases, the first 0.49 s
    "tests/test_bandwidth_selectors.py::test_sj_equals_r_bw_sj": "sweep",  # 1.0 s, 13 cases, the first 0.33 s
    "tests/test_binding.py::test_the_streamed_pass_runs_on_numpy_and_equals_the_host_paths": "sweep",  # 0.6 s, 20 cases, the first 0.01 s
    "tests/test_dask_weights.py::test_leave_one_out_nearest_skips_the_query_itself": "sweep",  # 1.2 s, 4 cases, the first 0.54 s
    "tests/test_density.py::test_equals_sklearn_kernel_density_in_high_dimensions": "sweep",  # 0.9 s, 12 cases, the first 0.01 s
    "tests/test_engine_numerics.py::test_any_finite_bandwidth_tiny_gives_the_nearest_value_huge_the_global_mean": "sweep",  # 0.5 s, 120 cases, the first 0.01 s
    "tests/test_float32.py::test_float32_outputs_stay_float32": "sweep",  # 0.5 s, 14 cases, the first 0.02 s
    "tests/test_kernel_density_estimator.py::test_sample_mean_and_covariance_match_the_mixture": "sweep",  # 0.8 s, 9 cases, the first 0.01 s
    "tests/test_loess_robust.py::test_robust_fit_equals_r_loess_and_statsmodels": "sweep",  # 1.6 s, 3 cases, the first 0.56 s
    "tests/test_loess_robust.py::test_weighted_robust_fit_equals_r_loess": "sweep",  # 0.9 s, 2 cases, the first 0.46 s
    "tests/test_loess_surface.py::test_direct_equals_r_loess": "sweep",  # 1.7 s, 2 cases, the first 0.82 s
    "tests/test_mean_shift_bins.py::test_bin_seeds_equal_scikit_learn": "sweep",  # 0.8 s, 72 cases, the first 0.01 s
    "tests/test_mean_shift_bins.py::test_mean_shift_with_bin_seeding_equals_scikit_learn": "sweep",  # 2.1 s, 2 cases, the first 1.38 s
    "tests/test_nn_dropin.py::test_self_attn_replaced_inside_transformer_encoder_layer": "sweep",  # 1.7 s, 2 cases, the first 0.82 s
    "tests/test_nn_dropin.py::test_transformer_layer_and_encoder_take_unbatched_input_like_torch": "sweep",  # 1.5 s, 2 cases, the first 0.81 s
    "tests/test_nn_flex.py::test_flex_formulation_matches_streamed_reference_on_cpu": "sweep",  # 1.4 s, 4 cases, the first 0.34 s
    "tests/test_nn_functional.py::test_distance_kernels_equal_engine_local_mean": "sweep",  # 0.9 s, 6 cases, the first 0.13 s
    "tests/test_nn_modules.py::test_language_model_is_causal": "sweep",  # 0.6 s, 3 cases, the first 0.10 s
    "tests/test_nn_modules.py::test_layer_equals_transformer_encoder_layer": "sweep",  # 0.7 s, 8 cases, the first 0.05 s
    "tests/test_nn_streaming.py::test_causal_gaussian_per_head_bandwidth_and_broadcast_batch": "sweep",  # 0.7 s, 3 cases, the first 0.11 s
    "tests/test_nn_streaming.py::test_low_precision_backward_runs_and_matches": "sweep",  # 0.9 s, 8 cases, the first 0.06 s
    "tests/test_nn_streaming.py::test_streamed_local_linear_matches_dense_weights": "sweep",  # 1.1 s, 9 cases, the first 0.18 s
    "tests/test_nn_train_lm.py::test_train_lm_tiny": "sweep",  # 1.4 s, 2 cases, the first 0.45 s
    "tests/test_nonlocal_block.py::test_fresh_block_is_the_identity_and_keeps_shapes": "sweep",  # 1.2 s, 12 cases, the first 0.15 s
    "tests/test_polynomial.py::test_equals_statsmodels_lowess": "sweep",  # 0.5 s, 6 cases, the first 0.03 s
    "tests/test_semi_supervised.py::test_clamped_gaussian_reproduces_label_propagation_rbf": "sweep",  # 1.0 s, 3 cases, the first 0.38 s
    "tests/test_localized.py::test_check_estimator": "sweep",  # 16.9 s, 2 configurations, the first 4.80 s (the same checks)
    "tests/test_manifold.py::test_check_estimator": "sweep",  # 6.1 s, 2 configurations, the first 0.64 s (the same checks)
    "tests/test_selection.py::test_check_estimator_with_cv": "sweep",  # 6.6 s, 2 configurations, the first 2.73 s (the same checks)
    "tests/test_fuzz_estimators.py::test_estimator_many_features": "cases:4-5000-",  # 27.1 s: 5,000 features (1,000 stay)
    # single slow tests; the same reference is compared by a test of the quick suite
    "tests/test_compiled_cache.py::test_reordered_profiles_recompile_the_compact_pass": "whole",  # 30 s (three interpreters, two compiles); the probe modules' test is quick
    "tests/test_array_api.py::test_flexattention_chunks_and_new_sample_weights_do_not_recompile": "whole",  # 2.7 s
    "tests/test_array_api.py::test_mean_shift_on_tensors_with_sample_weight_and_float32": "whole",  # 2.3 s
    "tests/test_dask.py::test_classifier_on_dask": "whole",  # 3.1 s
    "tests/test_dask.py::test_kernel_density_keeps_float32_on_dask": "whole",  # 2.0 s
    "tests/test_dask.py::test_regressor_fits_without_gathering_the_samples": "whole",  # 5.2 s
    "tests/test_dask.py::test_streams_a_sample_set_larger_than_a_worker": "whole",  # 20.3 s
    "tests/test_dask.py::test_weighted_bandwidth_rule_equals_in_memory": "whole",  # 5.2 s
    "tests/test_density.py::test_cosine_in_2d_integrates_to_one_where_sklearn_does_not": "whole",  # 8.0 s
    "tests/test_engine.py::test_memory_does_not_grow_with_queries_times_samples": "whole",  # 14.8 s
    "tests/test_gpu_diagnostics.py::test_candidate_paths_agree_with_the_kernels_formulas": "whole",  # 17.1 s
    "tests/test_loess_surface.py::test_memory_budget": "whole",  # 3.5 s
    "tests/test_metric_learning.py::test_finds_the_relevant_directions_of_friedman1": "whole",  # 5.5 s
    "tests/test_nn_compile.py::test_fused_banded_and_streamed_paths_compile_without_graph_breaks": "whole",  # 9.4 s
    "tests/test_nn_train_lm.py::test_sigint_during_training_exits_130_with_one_line_and_the_partial_log": "whole",  # 19.4 s
    "tests/test_nn_triton.py::test_float32_products_are_added_per_block_not_chained_into_the_running_sum": "whole",  # 31.3 s
    "tests/test_uniform_edge.py::test_per_feature_bandwidths_keep_the_edge_on_every_path": "whole",  # 2.2 s
    "tests/test_uniform_edge.py::test_tensors_keep_the_samples_at_the_edge": "whole",  # 5.9 s
}
_BAD_INPUT = re.compile(r"error|raise|reject|refuse|invalid|bad|wrong|nan|inf|empty|fuzz|valid|warn|name")


def pytest_collection_modifyitems(config, items):
    kept = set()
    for item in items:
        base = item.nodeid.split("[", 1)[0]
        if base not in SLOW or _BAD_INPUT.search(item.originalname if hasattr(item, "originalname") else item.name):
            continue
        kind = SLOW[base]
        if kind.startswith("cases:") and kind[len("cases:"):] not in item.nodeid:
            continue  # "cases:ID": only the cases whose id contains ID are slow
        if "[" in item.nodeid and kind == "sweep" and base not in kept:
            kept.add(base)  # the sweep's first case: its representative in the quick suite
            continue
        item.add_marker(pytest.mark.slow)


@pytest.fixture
def dispatch(monkeypatch):
    """scikit-learn's array-API dispatch (PyTorch tensors in, tensors out) for one test."""
    import sklearn

    monkeypatch.setenv("SCIPY_ARRAY_API", "1")  # scikit-learn requires it for array-API dispatch
    with sklearn.config_context(array_api_dispatch=True):
        yield


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def pytest_terminal_summary(terminalreporter):
    """The fuzz and robustness suites' size and time, in every run's summary (CI's log too)."""
    reports = [r for outcome in ("passed", "failed", "xfailed", "skipped")
               for r in terminalreporter.getreports(outcome)
               if r.when == "call" and "/test_fuzz_" in f"/{r.nodeid}"]
    if reports:
        failed = sum(r.outcome == "failed" for r in reports)
        seconds = sum(r.duration for r in reports)
        terminalreporter.write_line(
            f"fuzz suite: {len(reports)} cases ({failed} failed), {seconds:.1f} s; hypothesis profile "
            f"{os.environ.get('HYPOTHESIS_PROFILE', 'ci')!r}, up to {settings.default.max_examples} examples a case")

"""The order of the gallery: that of the user guide (kernels, local means, the localization
trick, fixed points, geometry, denoising, attention). Its own module, because Sphinx pickles the
configuration and a function defined in conf.py cannot be pickled."""

ORDER = ["plot_kernel_profiles.py", "plot_nadaraya_watson.py", "plot_classification.py",
         "plot_pipeline_search.py", "plot_learned_kernel_diamonds.py", "plot_kernel_density.py", "plot_loess.py", "plot_binned_million.py",
         "plot_output_adaptive.py", "plot_sequence_space_time.py", "plot_tsk_fuzzy.py",
         "plot_mean_shift.py", "plot_label_propagation.py", "plot_hopfield.py", "plot_lle.py",
         "plot_lazy_autoencoder.py", "plot_nl_means.py", "plot_attention_kernels.py",
         "plot_transformer_kernels.py"]


def position(filename):
    """Listed examples in ORDER, new ones after them by name."""
    return (ORDER.index(filename), "") if filename in ORDER else (len(ORDER), filename)

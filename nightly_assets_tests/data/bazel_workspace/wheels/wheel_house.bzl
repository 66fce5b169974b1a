"""A wheel written into a declared folder, as TensorFlow's pip_package writes its wheel house."""

def _wheel_house_impl(ctx):
    house = ctx.actions.declare_directory(ctx.attr.name)
    wheel = "{}/{}-{}-py3-none-any.whl".format(house.path, ctx.attr.distribution, ctx.attr.version)
    ctx.actions.run_shell(
        inputs = ctx.files.srcs + [ctx.file.tool],
        outputs = [house],
        command = 'python3 "$@"',
        arguments = [ctx.file.tool.path, wheel, ctx.attr.distribution, ctx.attr.version] +
                    [f.path for f in ctx.files.srcs],
    )
    return [DefaultInfo(files = depset([house]))]

wheel_house = rule(
    implementation = _wheel_house_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = True),
        "tool": attr.label(allow_single_file = True),
        "distribution": attr.string(),
        "version": attr.string(),
    },
)

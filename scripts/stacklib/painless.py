"""Painless, the scripting language of scripted updates (WRITE_METHOD=script), for an
OpenSearch node. The integ-test-zips have no scripting module. OpenSearch publishes its
`lang-painless` module to Maven Central (org.opensearch.plugin); Elastic does not publish
Elasticsearch's (only its SPI), so an Elasticsearch node from the integ-test-zip cannot run
scripts, and the tests run scripted updates on OpenSearch."""

from __future__ import annotations

import re
import shutil
import time
import zipfile
from pathlib import Path

from . import maven
from .config import CACHE_DIR, StackError, log

POM = Path(__file__).resolve().parent.parent / "painless-pom.xml"
MODULE = "lang-painless"


def install(home: Path, version: str) -> None:
    """Put OpenSearch `version`'s lang-painless module into the node at `home` (once): the
    module's own jars (the module, its SPI, ANTLR, ASM), not those the server has in lib/."""
    target = home / "modules" / MODULE
    if target.is_dir():
        return
    libs = download(version)
    provided = {_artifact(jar.name) for jar in (home / "lib").glob("*.jar")}
    partial = target.with_name(f"{MODULE}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for jar in sorted(libs.glob("*.jar")):
        if _artifact(jar.name) not in provided:
            shutil.copyfile(jar, partial / jar.name)
    java = _descriptor_value(home / "modules" / "transport-netty4", "java.version") or "21"
    (partial / "plugin-descriptor.properties").write_text(
        "\n".join(
            [
                "description=Painless scripting language (from Maven Central)",
                f"version={version}",
                f"name={MODULE}",
                f"classname={_plugin_class(libs, version)}",
                f"java.version={java}",
                f"opensearch.version={version}",
                "custom.foldername=",
                "extended.plugins=",
                "has.native.controller=false",
                "",
            ]
        )
    )
    # Painless compiles each script to a class in its own class loader.
    (partial / "plugin-security.policy").write_text(
        "grant {\n"
        '  permission java.lang.RuntimePermission "createClassLoader";\n'
        '  permission java.lang.RuntimePermission "getClassLoader";\n'
        "};\n"
    )
    partial.rename(target)


def download(version: str) -> Path:
    """OpenSearch `version`'s lang-painless jars, downloaded once into the cache."""
    libs = CACHE_DIR / f"opensearch-painless-{version}"
    if not libs.is_dir():
        log(f"downloading OpenSearch {version} lang-painless from Maven Central")
        t0 = time.monotonic()
        maven.classpath(POM, {"opensearch.version": version}, libs, "lang-painless")
        log(f"lang-painless downloaded in {time.monotonic() - t0:.1f}s")
    return libs


def _plugin_class(libs: Path, version: str) -> str:
    """The module's plugin class: `PainlessModulePlugin` in 3.x, `PainlessPlugin` in 2.x."""
    with zipfile.ZipFile(libs / f"{MODULE}-{version}.jar") as jar:
        names = set(jar.namelist())
    for name in ("PainlessModulePlugin", "PainlessPlugin"):
        if f"org/opensearch/painless/{name}.class" in names:
            return f"org.opensearch.painless.{name}"
    msg = f"{MODULE}-{version}.jar has no Painless plugin class"
    raise StackError(msg)


def _artifact(jar: str) -> str:
    """`asm-commons-9.7.jar` → `asm-commons`."""
    return re.sub(r"-\d[\w.]*(-\d+)?\.jar$", "", jar)


def _descriptor_value(module: Path, key: str) -> str | None:
    path = module / "plugin-descriptor.properties"
    if not path.exists():
        return None
    for line in path.read_text().splitlines():
        if line.startswith(f"{key}="):
            return line.split("=", 1)[1].strip() or None
    return None

"""Temperature conversions."""

from thermo.convert import celsius_to_fahrenheit, celsius_to_kelvin, fahrenheit_to_celsius

__all__ = ["celsius_to_fahrenheit", "celsius_to_kelvin", "fahrenheit_to_celsius"]
